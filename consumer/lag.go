package consumer

import (
	"context"
	"time"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/transport"
)

// Lag is how far behind a log's end the work is, per shard.
type Lag struct {
	// Held is the index held now, from the position below which its work
	// is done (Positions); nil when nothing is served.
	Held []transport.Lag
	// Group is the whole group, from the current epoch's low watermark
	// (checkpoint.Epoch.Low): every worker reports it, holding or not;
	// nil without checkpoints.
	Group []transport.Lag
	// System and Sources say what the log is (transport.Info's System and
	// Destinations): the presence record carries them, so that nandi
	// status can count a Redis stream's entries behind the group.
	System  string
	Sources []string
}

// Lag describes the source (one Info) and reads the checkpoint ledger,
// and returns the lag of the index held and of the group: the one place
// nandi computes lag, for package metrics (at each scrape) and the
// worker's presence record (each interval). A source that is not a log
// has none.
func (c *Consumer) Lag(ctx context.Context) (Lag, error) {
	info, err := c.src.Info(ctx)
	if err != nil || !info.Log {
		return Lag{}, err
	}
	_, held, _ := c.Positions()
	var st *checkpoint.State
	if c.ledger != nil {
		if st, err = c.ledger.ReadLow(ctx); err != nil {
			st = nil
		}
	}
	return lagOf(held, st, info), err
}

// lagReading is a lag computed on the consumer's schedule.
type lagReading struct {
	lag Lag
	at  time.Time
	err error
}

// LastLag returns the lag as the worker last computed it, on its own
// schedule (once per lease interval, with its presence record; with
// NoPresence, once WantLag was called), and when: what package metrics
// serves at a scrape, so that a scrape does no I/O. It changes nothing. at
// is zero before the first computation (and always for a lease without a
// Redis client, which has no presence loop); err is why the last one
// failed.
func (c *Consumer) LastLag() (l Lag, at time.Time, err error) {
	r := c.lastLag.Load()
	if r == nil {
		return Lag{}, time.Time{}, nil
	}
	return r.lag, r.at, r.err
}

// WantLag makes the worker compute its lag each lease interval from now
// on, also with NoPresence (which otherwise spares the source's
// description and the ledger's read that it costs), for LastLag.
// metrics.Register calls it.
func (c *Consumer) WantLag() { c.lagWanted.Store(true) }

// lagOf is the lag of positions held (nil: none) and of the group's low
// watermark in st's current epoch (nil: none), against the ends of the
// log info describes.
func lagOf(held []transport.Position, st *checkpoint.State, info transport.Info) Lag {
	l := Lag{System: info.System, Sources: info.Destinations}
	of := func(pos []transport.Position) []transport.Lag {
		out := make([]transport.Lag, 0, len(pos))
		for s, p := range pos {
			if s >= len(info.Ends) {
				break
			}
			out = append(out, transport.LagOf(p, info.Ends[s]))
		}
		return out
	}
	if held != nil {
		l.Held = of(held)
	}
	if st != nil && st.Current != nil {
		low := make([]transport.Position, len(st.Current.Start))
		for s := range low {
			low[s] = st.Current.Low(s)
		}
		l.Group = of(low)
	}
	return l
}
