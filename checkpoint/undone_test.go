package checkpoint

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/nandi-go/nandi/transport"
	"pgregory.net/rapid"
)

// Any ascending list of positions reads back as written.
func TestUndoneRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 200).Draw(t, "n")
		p := transport.Position{Hi: rapid.Uint64Range(0, 1<<50).Draw(t, "hi"), Lo: rapid.Uint64().Draw(t, "lo")}
		var ps []transport.Position
		for range n {
			ps = append(ps, p)
			if rapid.Bool().Draw(t, "same hi") && p.Lo < 1<<63 {
				p.Lo += rapid.Uint64Range(1, 1<<20).Draw(t, "d")
			} else {
				p = transport.Position{Hi: p.Hi + rapid.Uint64Range(1, 1<<20).Draw(t, "h"), Lo: rapid.Uint64().Draw(t, "l")}
			}
		}
		got, err := decodeUndone(encodeUndone(ps))
		if err != nil || !slices.Equal(got, ps) {
			t.Fatalf("%v read back as %v (%v)", ps, got, err)
		}
	})
}

// Ledgers written before the compact encoding list absolute positions
// only; they read as before.
func TestUndoneReadsAbsoluteLists(t *testing.T) {
	ps := []transport.Position{{Hi: 5, Lo: 1}, {Hi: 5, Lo: 9}, {Hi: 7, Lo: 0}}
	var old []string
	for _, p := range ps {
		old = append(old, encode(p))
	}
	got, err := decodeUndone(strings.Join(old, " "))
	if err != nil || !slices.Equal(got, ps) {
		t.Errorf("an absolute list read as %v (%v); want %v", got, err, ps)
	}
}

// What is not a list of ascending positions is refused as corrupt,
// never read as fewer positions (which would call unfinished work done).
func TestUndoneRefusesCorruptLists(t *testing.T) {
	first := encode(transport.Position{Hi: 5, Lo: 1})
	for _, s := range []string{"+1", "3:0", first + " +0", first + " 0:4", first + " +x", first + " 2", first + " " + first, first + " 1:2:3",
		encode(transport.Position{Hi: 6}) + " " + first} {
		if _, err := decodeUndone(s); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%q: %v; want ErrCorrupt", s, err)
		}
	}
}
