package transport_test

import (
	"fmt"

	"github.com/nandi-go/nandi/transport"
)

// The task id of a key, and the share and aligned shard it belongs to:
// what every worker and producer computes alike (docs/transports.md gives
// the spec and these vectors for producers in other languages).
func ExampleTaskID() {
	for _, key := range []string{"42", "0042", "order-7"} {
		id := transport.TaskID(key)
		fmt.Printf("%-8s id %-20d index %d of 5, shard %d of 12\n", key, id, id%5, id%12)
	}
	// Output:
	// 42       id 42                   index 2 of 5, shard 6 of 12
	// 0042     id 42                   index 2 of 5, shard 6 of 12
	// order-7  id 16061096995313344059 index 4 of 5, shard 3 of 12
}
