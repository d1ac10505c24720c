package transport

// Lag is how far a position is behind a log's end.
type Lag struct {
	// Timed is true for Redis stream IDs (the end's Hi is an entry time
	// in ms): Seconds is the entry time between them. Otherwise Messages
	// is the offsets between them.
	Timed    bool
	Seconds  float64
	Messages int64
	// Known is false for a Redis stream position with no entry time yet
	// (nothing read): there is nothing to compare.
	Known bool
}

// LagOf returns how far p is behind end, the next position of the log's
// shard (Info.Ends): 0 when p is at or past it.
func LagOf(p, end Position) Lag {
	if end.Hi > 0 { // a Redis stream ID: Hi is the entry's time in ms
		if p.Hi == 0 {
			return Lag{Timed: true}
		}
		l := Lag{Timed: true, Known: true}
		if p.Less(end) && end.Hi > p.Hi {
			l.Seconds = float64(end.Hi-p.Hi) / 1000
		}
		return l
	}
	l := Lag{Known: true}
	if p.Less(end) {
		l.Messages = int64(end.Lo - p.Lo)
	}
	return l
}
