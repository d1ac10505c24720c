package partition

// Aligned shards. A log whose shard s (of n) holds only tasks whose id has
// id % n == s is aligned with the group's filter id % Replicas == Index:
// the holder of index k of r can own an id in shard s only when
// s % g == k % g, g = gcd(n, r) (the Chinese remainder theorem: id % n == s
// and id % r == k have a common solution exactly then). So it reads n/g
// shards instead of n; when r divides n, each shard is read by exactly
// one holder, as in a Kafka consumer group, and otherwise each entry is
// read r/g times instead of r times. Shard counts with many divisors
// (12, 24, 48, 60, 120) make the common group sizes exact.

// CanOwnIn reports whether the assignment can own a task in shard s of an
// aligned log of n shards: whether some id has id % n == s and
// id % Replicas == Index. The zero Assignment owns nothing.
func (a Assignment) CanOwnIn(s, n int) bool {
	if a.Replicas < 1 || n < 1 || s < 0 || s >= n {
		return false
	}
	g := gcd(n, a.Replicas)
	return s%g == a.Index%g
}

// ShardsOf returns the shards of an aligned log of n shards that the
// assignment can own tasks in, ascending: the only ones its holder needs
// to read (n/gcd(n, Replicas) of them).
func (a Assignment) ShardsOf(n int) []int {
	if a.Replicas < 1 || n < 1 {
		return nil
	}
	g := gcd(n, a.Replicas)
	out := make([]int, 0, n/g)
	for s := a.Index % g; s < n; s += g {
		out = append(out, s)
	}
	return out
}

// ReadAmplification is how many holders of a group of r read each entry
// of an aligned log of n shards: r/gcd(n, r) (1 when r divides n; r on a
// log that is not aligned, where every holder reads every entry).
func ReadAmplification(n, r int) int {
	if n < 1 || r < 1 {
		return 0
	}
	return r / gcd(n, r)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
