package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nandi-go/nandi/internal/redistest"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// A damaged ledger (a hand edit, a bug, a hostile writer) is refused with
// ErrCorrupt naming the field, by Open (whose script checks what it loops
// over before writing anything) and by Read, on a real redis-server:
// never a panic (an index out of range, before), never an allocation or a
// script loop without bound (replicas of 10^12, before: out of memory in
// Read, and a script looping for hours in Open).
func TestCorruptLedgerIsRefusedNamingTheField(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(func(*redis.Options) {})
	ctx := context.Background()
	cases := []struct {
		field, value string
		marks        bool // a field of the marks' hash, not of the head
		// Open with other replicas walks every epoch's head to start the
		// next one; with the same replicas it does not.
		remap bool
		// openRefuses: the Open script refuses the field (the counts it
		// loops over); the others Open returns, then the parser refuses.
		openRefuses bool
		want        string // the field the error names, when not field
	}{
		{field: "1:0:1", value: "garbage", marks: true},
		{field: "1:0:1", value: "00000000000000000000-00000000000000000003 00000000000000000000-00000000000000000009 10 +5 +6", marks: true},
		{field: "1:0:1", value: "00000000000000000000-00000000000000000003 00000000000000000000-00000000000000000009 ten", marks: true},
		{field: "1:start:-1", value: "00000000000000000000-00000000000000000005"},
		{field: "1:cut:7", value: "00000000000000000000-00000000000000000005"},
		{field: "1:hi:0", value: "garbage"},
		{field: "1:start:0", value: "-1"},
		{field: "1:aligned", value: "x", openRefuses: true},
		{field: "1:r", value: "1000000000000", remap: true, openRefuses: true},
		{field: "1:r", value: "1000000000000", openRefuses: true},
		{field: "1:r", value: "-3", remap: true, openRefuses: true},
		{field: "1:r", value: "2.5", openRefuses: true},
		{field: "1:shards", value: "1000000000000", remap: true, openRefuses: true},
		{field: "1:shards", value: "0", openRefuses: true},
		{field: "1:shards", value: "60000", openRefuses: true},
		{field: "1:shards", value: "1000", want: "1:start:1"},
		{field: "cur", value: "one", openRefuses: true},
		{field: "v", value: "2", openRefuses: true},
	}
	for i, tc := range cases {
		t.Run(tc.field+"="+tc.value, func(t *testing.T) {
			group := fmt.Sprintf("corrupt-%d", i)
			l := NewRedis(c, group)
			origin := []transport.Position{{}}
			if _, err := l.Open(ctx, OpenRequest{Replicas: 2, Token: 10, Origin: origin}); err != nil {
				t.Fatal(err)
			}
			if err := l.Write(ctx, WriteRequest{Epoch: 1, Token: 10, Index: 1, Marks: map[int]Mark{0: {Low: transport.Offset(3), High: transport.Offset(9), Undone: []transport.Position{transport.Offset(5)}}}}); err != nil {
				t.Fatal(err)
			}
			key := Key(group)
			if tc.marks {
				key += ":marks"
			}
			if err := c.HSet(ctx, key, tc.field, tc.value).Err(); err != nil {
				t.Fatal(err)
			}
			before, _ := c.HGetAll(ctx, Key(group)).Result()

			start := time.Now()
			_, err := l.Read(ctx)
			want := tc.field
			if tc.want != "" {
				want = tc.want
			}
			checkCorrupt(t, "Read", err, want)

			replicas := 2
			if tc.remap {
				replicas = 3
			}
			// Index 1 opens: the marks it reads are its own.
			_, err = l.Open(ctx, OpenRequest{Replicas: replicas, Index: 1, Token: 20, Origin: origin})
			checkCorrupt(t, "Open", err, want)
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("Read and Open took %v on a corrupt ledger; they must refuse it, not work through it", took)
			}
			if tc.openRefuses {
				after, _ := c.HGetAll(ctx, Key(group)).Result()
				if len(after) != len(before) {
					t.Errorf("Open changed the corrupt ledger (%d fields, then %d): it must refuse before writing", len(before), len(after))
				}
			}
		})
	}
}

func checkCorrupt(t *testing.T, what string, err error, field string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s = %v; want ErrCorrupt", what, err)
	}
	if !strings.Contains(err.Error(), `"`+field+`"`) {
		t.Errorf("%s's error %q does not name the field %q", what, err, field)
	}
}
