package memledger_test

import (
	"context"
	"fmt"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/checkpoint/memledger"
	"github.com/nandi-go/nandi/transport"
)

// A group's ledger in memory: the first holder opens it (epoch 1), writes
// its mark, and a reader sees the group's low watermark.
func Example() {
	ctx := context.Background()
	l := memledger.New().Ledger("orders")
	st, err := l.Open(ctx, checkpoint.OpenRequest{Replicas: 1, Index: 0, Token: 1, Origin: []transport.Position{transport.Offset(0)}})
	if err != nil {
		panic(err)
	}
	mark := checkpoint.Mark{Low: transport.Offset(42), High: transport.Offset(42)}
	if err := l.Write(ctx, checkpoint.WriteRequest{Epoch: st.Current.N, Token: 1, Index: 0, Replicas: 1, Marks: map[int]checkpoint.Mark{0: mark}}); err != nil {
		panic(err)
	}
	low, _ := l.ReadLow(ctx)
	fmt.Println("epoch", low.Current.N, "low", low.Current.Low(0))
	// Output: epoch 1 low 42
}
