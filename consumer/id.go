package consumer

// ID is the task id of a message key, the same on every worker: a key that
// is a decimal uint64 ("42", also "0042") is that number; any other key is
// its 64-bit FNV-1a hash (hash/fnv's New64a over the key's bytes), which is
// simple to compute the same way in any language.
func ID(key string) uint64 {
	if n, ok := parseDecimal(key); ok {
		return n
	}
	return fnv1a(key)
}

// parseDecimal is strconv.ParseUint(s, 10, 64) without its error value
// (and its allocation when it fails), for the per-message path. FuzzID
// holds it to strconv's answer.
func parseDecimal(s string) (uint64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	for len(s) > 1 && s[0] == '0' { // leading zeros count for nothing, however many
		s = s[1:]
	}
	if len(s) > 20 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return 0, false
		}
		if i >= 19 { // the 20th digit may overflow
			if n > (1<<64-1)/10 {
				return 0, false
			}
			n *= 10
			if n+uint64(d) < n {
				return 0, false
			}
			n += uint64(d)
			continue
		}
		n = n*10 + uint64(d)
	}
	return n, true
}

// fnv1a is hash/fnv's 64-bit FNV-1a of s, without its allocation.
func fnv1a(s string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	return h
}
