package consumertest_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/consumertest"
	"github.com/nandi-go/nandi/transport"
)

// A handler that sends each task's mail once: it records the task as sent
// with the mail, under its term's token, in one step of its store.
func Example() {
	var mu sync.Mutex
	sent := map[string]int{}    // task -> mails sent
	fence := map[string]int64{} // customer -> newest token
	h := func(ctx context.Context, m *transport.Message) error {
		a, _ := consumer.AssignmentFromContext(ctx)
		mu.Lock()
		defer mu.Unlock()
		if a.Token < fence[m.Key] || sent[string(m.Payload)] > 0 {
			return nil
		}
		fence[m.Key] = a.Token
		sent[string(m.Payload)]++ // the mail goes out here
		return nil
	}
	r, err := consumertest.Run(context.Background(), h, consumertest.Options{
		Applied: func(_ context.Context, m *transport.Message) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return sent[string(m.Payload)], nil
		},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(r.Results), "tasks,", len(r.Failures()), "not sent exactly once")
	// Output: 21 tasks, 0 not sent exactly once
}
