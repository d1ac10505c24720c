package checkpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/nandi-go/nandi/transport"
)

// FuzzParse reads hostile ledger hashes (one "field=value" per line), as
// every worker's Open and nandi status's Read do: each is read or refused
// with ErrCorrupt; none panics, and a ledger that reads is safe to use
// (every mark in range, Done and From answer).
func FuzzParse(f *testing.F) {
	valid := strings.Join([]string{
		"v=2", "cur=2", "hist=1 2",
		"1:r=2", "1:tok=10", "1:shards=2", "1:start:0=00000000000000000000-00000000000000000000", "1:start:1=00000000000000000000-00000000000000000000",
		"1:pos:0:1=00000000000000000000-00000000000000000003", "1:top:0:1=00000000000000000000-00000000000000000009",
		"1:und:0:1=00000000000000000000-00000000000000000005 +2", "1:ptok:0:1=10", "1:otok:1=10",
		"2:r=3", "2:tok=20", "2:shards=2", "2:start:0=00000000000000000000-00000000000000000003", "2:start:1=00000000000000000000-00000000000000000000",
		"2:pos:1:2=00000000000000000001-00000000000000000000",
	}, "\n")
	f.Add(valid)
	f.Add(strings.Replace(valid, "1:pos:0:1", "1:pos:0:-1", 1))
	f.Add(strings.Replace(valid, "1:und:0:1", "1:und:-1:0", 1))
	f.Add(strings.Replace(valid, "2:r=3", "2:r=1000000000000", 1))
	f.Add(strings.Replace(valid, "1:shards=2", "1:shards=65536", 1))
	f.Add(strings.Replace(valid, "hist=1 2", "hist=2 1 2 1", 1))
	f.Add("cur=1\nhist=1\n1:r=1\n1:shards=1\n1:start:0=x")
	f.Fuzz(func(t *testing.T, text string) {
		var flat []any
		for line := range strings.SplitSeq(text, "\n") {
			k, v, _ := strings.Cut(line, "=")
			flat = append(flat, k, v)
		}
		st, err := parse(flat)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("parse = %v; want nil or ErrCorrupt", err)
			}
			return
		}
		if st.Current == nil {
			return
		}
		for _, e := range st.History {
			if e.R < 1 || e.R > MaxReplicas || len(e.Start) < 1 || len(e.Start) > MaxShards {
				t.Fatalf("epoch %d read with %d replicas and %d shards", e.N, e.R, len(e.Start))
			}
			for sl := range e.Marks {
				if sl.Shard < 0 || sl.Shard >= len(e.Start) || sl.Index < 0 || sl.Index >= e.R {
					t.Fatalf("epoch %d has a mark at %+v, outside its %d shards and %d replicas", e.N, sl, len(e.Start), e.R)
				}
			}
			for s := range min(len(e.Start), 4) {
				for k := range min(e.R, 4) {
					m := e.Mark(s, k)
					if m.High.Less(m.Low) {
						t.Fatalf("mark %d/%d of epoch %d: High %v below Low %v", s, k, e.N, m.High, m.Low)
					}
				}
			}
		}
		for k := range min(st.Current.R, 4) {
			_ = st.From(k)
		}
		for s := range len(st.Current.Start) + 1 {
			for _, p := range []transport.Position{{}, transport.Offset(4), transport.Offset(6), {Hi: 1}} {
				_ = st.Done(s, p, uint64(s))
			}
		}
	})
}
