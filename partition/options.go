package partition

import (
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"
)

// Defaults and bounds of Options.
const (
	DefaultInterval = 5 * time.Second
	MinInterval     = 100 * time.Millisecond
	DefaultGap      = 0.125
	MaxGap          = 0.2
)

// Options tune a Lease. Name is required; a zero value in any other field
// means the default written on it.
type Options struct {
	// Name is the group's name. Every key of the group carries the Redis
	// Cluster hash tag {Name}, so one node holds the whole group. Required;
	// it may not contain '{' or '}'.
	Name string

	// Interval is the length of one registration interval. It sets the pace
	// of everything: a new worker owns nothing for about two intervals, and a
	// change of membership costs the group about one interval of standing
	// down. It should be much larger than a registration round trip plus its
	// jitter. Default 5s; at least 100ms. All workers of a group must agree
	// (see ErrSettingsMismatch).
	Interval time.Duration

	// Gap is the timing slack as a fraction of Interval: registrations stay
	// Gap*Interval clear of both ends of an interval, and a worker that has
	// not completed a registration by Gap*Interval past the slot it was due
	// in stands down. Wider forgives slower round trips and longer pauses;
	// narrower spreads registrations better. Default 0.125; 0 < Gap <= 0.2.
	// All workers of a group must agree.
	Gap float64

	// WaitReplicas, when above zero, makes every registration wait (WAIT,
	// sent after the script on the same connection) until that many
	// replicas acknowledged it; a registration they did not acknowledge in
	// time is not counted by this worker and is retried. It narrows the
	// window in which a failover to a replica can lose a registration, and
	// it is what keeps a master cut off from its replicas from renewing
	// leases; it does not help when the old master keeps WaitReplicas
	// replicas on its side of a split (see the package doc). Needs a *redis.Client (including a Sentinel failover client)
	// or a *redis.ClusterClient. Default 0 (no waiting).
	WaitReplicas int

	// WaitTimeout bounds each WAIT. Default Gap*Interval/2, rounded up to
	// a whole millisecond (WAIT counts milliseconds, and WAIT n 0 waits
	// forever); at least 1ms.
	WaitTimeout time.Duration

	// Logger receives state changes at Info and trouble at Warn. Default:
	// silent.
	Logger *slog.Logger

	// Clock is the worker's own clock: every reading, deadline and send
	// time of the lease is taken on it. Default: the host's monotonic clock
	// (HostClock). Leave it nil in production; it exists so that tests can
	// run one worker's clock fast or slow and prove what the group does
	// about it (see Clock).
	Clock Clock

	// StandDownAtChange ends a term at once at a registration that
	// disagrees (ErrMappingChanged), as leases did before a term was kept
	// to its cap through a change of mapping: for benchmarks that measure
	// the two side by side. Leave it false.
	StandDownAtChange bool
}

func (o Options) withDefaults() Options {
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Gap == 0 {
		o.Gap = DefaultGap
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = (Margin(o.Interval, o.Gap)/2 + time.Millisecond - 1).Truncate(time.Millisecond)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = HostClock{}
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Name == "":
		return fmt.Errorf("%w: Name is empty: give the group a name, for example \"mail-sender\"", ErrInvalidOptions)
	case strings.ContainsAny(o.Name, "{}"):
		return fmt.Errorf("%w: Name %q contains '{' or '}': the name becomes the Redis Cluster hash tag {Name}, so it may not contain braces", ErrInvalidOptions, o.Name)
	case o.Interval < MinInterval:
		return fmt.Errorf("%w: Interval %v is below %v: an interval must be much longer than a registration round trip", ErrInvalidOptions, o.Interval, MinInterval)
	case math.IsNaN(o.Gap) || o.Gap <= 0 || o.Gap > MaxGap:
		return fmt.Errorf("%w: Gap %g is outside (0, %g]: it is a fraction of Interval, for example 0.125", ErrInvalidOptions, o.Gap, MaxGap)
	case o.WaitReplicas < 0:
		return fmt.Errorf("%w: WaitReplicas %d is negative: use 0 to not wait for replicas", ErrInvalidOptions, o.WaitReplicas)
	case o.WaitTimeout < time.Millisecond:
		return fmt.Errorf("%w: WaitTimeout %v is below 1ms: WAIT counts whole milliseconds, and WAIT with 0 waits forever", ErrInvalidOptions, o.WaitTimeout)
	}
	if m := Margin(o.Interval, o.Gap); m < time.Millisecond {
		return fmt.Errorf("%w: Gap %g of Interval %v is %v, below 1ms: widen the gap or lengthen the interval", ErrInvalidOptions, o.Gap, o.Interval, m)
	}
	return nil
}

// gapPPM is the gap in parts per million, the form the store compares.
func gapPPM(g float64) int64 { return int64(math.Round(g * 1e6)) }

// gapMicros is the gap in microseconds, computed exactly as the script does.
func gapMicros(intervalUS, ppm int64) int64 { return intervalUS * ppm / 1_000_000 }

// Validate reports whether opts would be accepted by New, with the same
// error (wrapping ErrInvalidOptions), after filling in the defaults.
func (o Options) Validate() error { return o.withDefaults().validate() }
