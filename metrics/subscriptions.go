package metrics

import (
	"github.com/nandi-go/nandi/consumer"
	"github.com/prometheus/client_golang/prometheus"
)

// Subscriptions registers the collectors of each consumer it is given on
// reg (as Register does) and unregisters them when the returned func is
// called: what watermillpubsub.SubscriberConfig.OnConsumer takes, so that
// every subscription exports its lease's and consumer's figures (lag,
// handler time, handoffs), labelled with its group, which watermillpubsub
// names GROUP:TOPIC. A second subscription of the same group and topic in
// one process exports nothing of its own (its series would be the first
// one's); its workers elsewhere export theirs.
func Subscriptions(reg prometheus.Registerer, opts Options) func(topic string, c *consumer.Consumer) (ended func()) {
	return func(_ string, c *consumer.Consumer) func() {
		o := opts.withDefaults()
		lc := newLeaseCollector(c.Lease().Name(), c.Lease().Stats, o)
		cc := newConsumerCollector(c, o)
		if err := reg.Register(lc); err != nil {
			return nil
		}
		if err := reg.Register(cc); err != nil {
			reg.Unregister(lc)
			return nil
		}
		return func() {
			reg.Unregister(cc)
			reg.Unregister(lc)
		}
	}
}
