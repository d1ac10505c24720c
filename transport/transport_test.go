package transport

import (
	"testing"

	"pgregory.net/rapid"
)

func TestPositionOrderAndText(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := Position{Hi: rapid.Uint64().Draw(t, "phi"), Lo: rapid.Uint64().Draw(t, "plo")}
		q := Position{Hi: rapid.Uint64().Draw(t, "qhi"), Lo: rapid.Uint64().Draw(t, "qlo")}
		if p.Compare(q) != -q.Compare(p) {
			t.Fatalf("Compare is not antisymmetric for %v, %v", p, q)
		}
		back, err := ParsePosition(p.String())
		if err != nil || back != p {
			t.Fatalf("ParsePosition(%q) = %v, %v; want %v", p.String(), back, err, p)
		}
		if !(p.Hi == ^uint64(0) && p.Lo == ^uint64(0)) && !p.Less(p.Next()) {
			t.Fatalf("%v.Next() = %v is not after it", p, p.Next())
		}
	})
	for _, bad := range []string{"", "x", "1-", "-1", "1-2-3", "18446744073709551616"} {
		if _, err := ParsePosition(bad); err == nil {
			t.Errorf("ParsePosition(%q) accepted", bad)
		}
	}
}
