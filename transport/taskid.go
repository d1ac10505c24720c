package transport

// TaskID is the task id of a message key, the same on every worker and
// every producer: a key that is a decimal uint64 ("42", also "0042") is
// that number; any other key is KeyHash(key). The group's filter is
// TaskID(key) % Replicas == Index (consumer.ID is this function).
func TaskID(key string) uint64 {
	if n, ok := parseDecimal(key); ok {
		return n
	}
	return KeyHash(key)
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

// KeyHash is the 64-bit FNV-1a hash of key's bytes (hash/fnv's New64a),
// without its allocation: simple to compute the same way in any language.
func KeyHash(key string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime
	}
	return h
}
