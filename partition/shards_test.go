package partition

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// A holder reads a shard of an aligned log if and only if the shard can
// hold an id it owns: checked against every id up to lcm(n, r), for random
// shard counts, group sizes and indexes; and each entry is read by
// ReadAmplification(n, r) holders of the group.
func TestShardChoice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 130).Draw(t, "shards")
		r := rapid.IntRange(1, 70).Draw(t, "replicas")
		k := rapid.IntRange(0, r-1).Draw(t, "index")
		a := Assignment{Index: k, Replicas: r}
		owns := make([]bool, n) // shard s holds an id a owns
		lcm := n / gcd(n, r) * r
		for id := range uint64(lcm) {
			if a.Owns(id) {
				owns[id%uint64(n)] = true
			}
		}
		var want []int
		for s := range n {
			if a.CanOwnIn(s, n) != owns[s] {
				t.Fatalf("CanOwnIn(%d, %d) for %d of %d is %v; some id in the shard is owned: %v", s, n, k, r, a.CanOwnIn(s, n), owns[s])
			}
			if owns[s] {
				want = append(want, s)
			}
		}
		if got := a.ShardsOf(n); !slices.Equal(got, want) {
			t.Fatalf("ShardsOf(%d) for %d of %d = %v; want %v", n, k, r, got, want)
		}
		// A random id is in a shard its owner reads; each shard is read by
		// ReadAmplification holders.
		id := rapid.Uint64().Draw(t, "id")
		owner := Assignment{Index: int(id % uint64(r)), Replicas: r}
		if !owner.CanOwnIn(int(id%uint64(n)), n) {
			t.Fatalf("id %d's owner %d of %d does not read its shard %d of %d", id, owner.Index, r, id%uint64(n), n)
		}
		s := rapid.IntRange(0, n-1).Draw(t, "shard")
		readers := 0
		for i := range r {
			if (Assignment{Index: i, Replicas: r}).CanOwnIn(s, n) {
				readers++
			}
		}
		if readers != ReadAmplification(n, r) {
			t.Fatalf("shard %d of %d is read by %d of %d holders; ReadAmplification says %d", s, n, readers, r, ReadAmplification(n, r))
		}
	})
}
