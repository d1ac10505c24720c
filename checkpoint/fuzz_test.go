package checkpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/nandi-go/nandi/transport"
)

// FuzzParse reads hostile ledger heads (one "field=value" per line) and
// hostile marks, as every worker's Open and nandi status's Read do: each
// is read or refused with ErrCorrupt; none panics, and a ledger that reads
// is safe to use (every count in range, Done and From answer).
func FuzzParse(f *testing.F) {
	valid := strings.Join([]string{
		"v=3", "cur=2", "hist=1 2",
		"1:r=2", "1:tok=10", "1:shards=2", "1:start:0=00000000000000000000-00000000000000000000", "1:start:1=00000000000000000000-00000000000000000000",
		"1:hi:0=00000000000000000000-00000000000000000009", "1:aligned=2", "1:cut:1=00000000000000000000-00000000000000000004",
		"2:r=3", "2:tok=20", "2:shards=2", "2:start:0=00000000000000000000-00000000000000000003", "2:start:1=00000000000000000000-00000000000000000000",
		"2:wait:0=2", "2:gone:1=1",
	}, "\n")
	mark := "00000000000000000000-00000000000000000003 00000000000000000000-00000000000000000009 10 00000000000000000000-00000000000000000005 +2"
	f.Add(valid, mark)
	f.Add(strings.Replace(valid, "1:start:1", "1:start:-1", 1), mark)
	f.Add(strings.Replace(valid, "1:cut:1", "1:cut:9", 1), "x y z")
	f.Add(strings.Replace(valid, "2:r=3", "2:r=1000000000000", 1), mark+" +0")
	f.Add(strings.Replace(valid, "1:shards=2", "1:shards=65536", 1), "")
	f.Add(strings.Replace(valid, "hist=1 2", "hist=2 1 2 1", 1), mark)
	f.Add(strings.Replace(valid, "v=3", "v=2", 1), mark)
	f.Add("v=3\ncur=1\nhist=1\n1:r=1\n1:shards=1\n1:start:0=x", "")
	f.Fuzz(func(t *testing.T, text, markValue string) {
		var flat []any
		for line := range strings.SplitSeq(text, "\n") {
			k, v, _ := strings.Cut(line, "=")
			flat = append(flat, k, v)
		}
		if m, _, err := decodeMark(markValue); err == nil {
			if m.High.Less(m.Low) {
				t.Fatalf("mark %q read with High %v below Low %v", markValue, m.High, m.Low)
			}
			for i, u := range m.Undone {
				if !m.Low.Less(u) || !u.Less(m.High) || (i > 0 && !m.Undone[i-1].Less(u)) {
					t.Fatalf("mark %q read with Undone %v outside (Low, High) or out of order", markValue, m.Undone)
				}
			}
		}
		st, err := parseHead(flat)
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
			if e.R < 1 || e.R > MaxReplicas || len(e.Start) < 1 || len(e.Start) > MaxShards || e.R*len(e.Start) > MaxSlots {
				t.Fatalf("epoch %d read with %d replicas and %d shards", e.N, e.R, len(e.Start))
			}
			if e.Aligned < 0 || e.Aligned > MaxShards || len(e.High) != len(e.Start) {
				t.Fatalf("epoch %d read aligned to %d with %d highs", e.N, e.Aligned, len(e.High))
			}
			for s := range e.Cut {
				if s < 0 || s >= len(e.Start) {
					t.Fatalf("epoch %d has a cut at shard %d, outside its %d shards", e.N, s, len(e.Start))
				}
			}
			for s := range min(len(e.Start), 4) {
				for k := range min(e.R, 4) {
					_ = e.Reads(s, k)
					_, _ = e.Placed(s, transport.Offset(5), uint64(k))
				}
				_ = e.Low(s)
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
