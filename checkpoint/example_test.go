package checkpoint_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// Two holders of a mapping of 2 write their marks; a new mapping of 3 then
// starts at the lowest mark and skips what the first one finished.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	ledger := checkpoint.NewRedis(client, "mail-sender")
	origin := []transport.Position{transport.Offset(0)} // one shard, from its start

	for k := range 2 {
		st, err := ledger.Open(ctx, checkpoint.OpenRequest{Replicas: 2, Index: k, Token: 100, Origin: origin})
		if err != nil {
			panic(err)
		}
		fmt.Printf("index %d of 2 reads from %v\n", k, st.From(k)[0])
	}
	// Index 0 finished everything below 10 but task 6; index 1 everything below 4.
	marks0 := map[int]checkpoint.Mark{0: {Low: transport.Offset(6), High: transport.Offset(10)}}
	marks1 := map[int]checkpoint.Mark{0: {Low: transport.Offset(4), High: transport.Offset(4)}}
	if err := ledger.Write(ctx, checkpoint.WriteRequest{Epoch: 1, Token: 100, Index: 0, Marks: marks0}); err != nil {
		panic(err)
	}
	if err := ledger.Write(ctx, checkpoint.WriteRequest{Epoch: 1, Token: 100, Index: 1, Marks: marks1}); err != nil {
		panic(err)
	}

	st, err := ledger.Open(ctx, checkpoint.OpenRequest{Replicas: 3, Index: 0, Token: 200, Origin: origin})
	if err != nil {
		panic(err)
	}
	fmt.Printf("epoch %d of 3 reads from %v\n", st.Current.N, st.From(0)[0])
	// Tasks read below the old marks: their old owners' marks are read
	// first, for the lot (a consumer does so for each batch it reads).
	var tasks []checkpoint.TaskAt
	for _, p := range []uint64{4, 6, 8} {
		tasks = append(tasks, checkpoint.TaskAt{Shard: 0, Position: transport.Offset(p), ID: 2})
	}
	if err := st.Prepare(ctx, tasks); err != nil {
		panic(err)
	}
	for _, p := range []uint64{4, 6, 8} {
		// id 2 was index 0's under the old mapping (2 % 2 == 0)
		fmt.Printf("task at %d with id 2 done before: %v\n", p, st.Done(0, transport.Offset(p), 2))
	}
	// Output:
	// index 0 of 2 reads from 0
	// index 1 of 2 reads from 0
	// epoch 2 of 3 reads from 4
	// task at 4 with id 2 done before: true
	// task at 6 with id 2 done before: false
	// task at 8 with id 2 done before: true
}
