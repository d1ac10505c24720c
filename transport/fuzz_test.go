package transport

import "testing"

// FuzzParsePosition: what parses prints back as itself, parsing is the
// inverse of String, and Next is the least position after p.
func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{"0", "5", "1700000000000-0", "1-18446744073709551615", "18446744073709551615-18446744073709551615", "-1", "1-", "a-b", "007"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePosition(s)
		if err != nil {
			return
		}
		back, err := ParsePosition(p.String())
		if err != nil || back != p {
			t.Fatalf("%q parses as %v, which prints as %q and parses as %v, %v", s, p, p.String(), back, err)
		}
		last := Position{Hi: ^uint64(0), Lo: ^uint64(0)}
		if n := p.Next(); !p.Less(n) && !(p == last && n == last) {
			t.Fatalf("%v.Next() = %v, not after it (the largest position's Next is itself)", p, n)
		}
	})
}
