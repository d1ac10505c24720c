package partition

import (
	"strings"
	"testing"
	"time"
)

// FuzzParseGroup reads hostile lease hashes (one "field=value" per line),
// as nandi status, watch and web do: each is read or refused with an
// error; none panics, and a group that reads has settings a lease could
// run with (watch sleeps an interval minus an offset plus a gap between
// reads: a negative or zero interval would make it spin).
func FuzzParseGroup(f *testing.F) {
	f.Add("interval_us=200000\\ngap_ppm=125000\\ntmax_us=1700000000000000\\nnonce=abc\\nc:8500000000=3\\nc:8499999999=3\\nt:8500000000:tok=1", int64(1700000000100000))
	f.Add("interval_us=1\\ngap_ppm=-5", int64(0))
	f.Add("interval_us=9223372036854775807\\ngap_ppm=200000\\ntmax_us=-9223372036854775808", int64(-1))
	f.Add("interval_us=100000\\ngap_ppm=1000000000", int64(5))
	f.Add("c:x=1\\nc:1=y", int64(5))
	f.Fuzz(func(t *testing.T, text string, now int64) {
		var flat []any
		for line := range strings.SplitSeq(strings.ReplaceAll(text, `\\n`, "\\n"), "\\n") {
			k, v, _ := strings.Cut(line, "=")
			flat = append(flat, k, v)
		}
		g, err := parseGroup("g", flat, now, []string{"run"})
		if err != nil {
			return
		}
		if g.Interval < MinInterval || g.Gap <= 0 || g.Gap > MaxGap {
			t.Fatalf("read settings interval %v, gap %g: no lease runs with them", g.Interval, g.Gap)
		}
		if g.Offset < 0 || g.Offset >= g.Interval {
			t.Fatalf("offset %v outside the interval %v", g.Offset, g.Interval)
		}
		if wait := g.Interval - g.Offset + time.Duration(float64(g.Interval)*g.Gap); wait <= 0 {
			t.Fatalf("watch would wait %v between reads", wait)
		}
	})
}
