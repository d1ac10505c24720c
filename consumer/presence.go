package consumer

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/nandi-go/nandi/presence"
	"github.com/redis/go-redis/v9"
)

var pid = os.Getpid()

// lastError is the last failed attempt, as presence shows it.
type lastError struct {
	msg string
	at  time.Time
}

// presence writes the worker's presence record once per lease interval
// until ctx ends, then removes it. Nothing reads it but people: a write
// that fails is left to the next one, silently (the lease reports the
// store's trouble).
//
// Before it, each interval, it reads the group's pause (PauseKey), also
// with NoPresence: a pause takes effect within an interval, and a read
// that fails leaves the pause as it was. The pause is read first, on its
// own timeout, so that a source whose Info hangs (the lag describes the
// source) cannot delay it; the lag then has half an interval, and the
// record a quarter, so one pass never outlasts its interval.
func (c *Consumer) presence(ctx context.Context) {
	client := c.lease.Client()
	if client == nil {
		return
	}
	iv, name := c.interval, c.lease.Name()
	ttl := presence.TTLIntervals * iv
	tick := time.NewTicker(iv)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, iv/4)
		pipe := client.Pipeline()
		pause, mis := pipe.Get(pctx, PauseKey(name)), pipe.Get(pctx, MisalignedKey(name))
		_, _ = pipe.Exec(pctx)
		c.notePause(pause)
		c.noteMisaligned(mis)
		cancel()
		// The lag costs a description of the source and a read of the
		// ledger: done for the presence record, or once something has asked
		// for it (WantLag: package metrics), not otherwise.
		var lag Lag
		var err error
		if !c.opts.NoPresence || c.lagWanted.Load() {
			lctx, cancel := context.WithTimeout(ctx, iv/2)
			lag, err = c.Lag(lctx)
			cancel()
			c.lastLag.Store(&lagReading{lag: lag, at: time.Now(), err: err})
		}
		if !c.opts.NoPresence {
			wctx, cancel := context.WithTimeout(ctx, iv/4)
			_ = presence.Write(wctx, client, name, c.record(lag, err), ttl)
			cancel()
		}
		select {
		case <-tick.C:
		case <-c.presenceNow:
		case <-ctx.Done():
			if !c.opts.NoPresence {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), iv)
				_ = presence.Remove(rctx, client, name, c.worker)
				cancel()
			}
			return
		}
	}
}

// notePause applies the pause key as read (a failed read changes nothing).
func (c *Consumer) notePause(cmd *redis.StringCmd) {
	if cmd == nil {
		return
	}
	b, err := cmd.Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		if c.pause.set(false, time.Time{}) {
			c.log.Info("group resumed: starting tasks again")
		}
	case err == nil:
		st := parsePause(b)
		if c.pause.set(true, st.Since) {
			c.log.Info("group paused: running tasks finish, none starts; the lease is kept", "since", st.Since, "reason", st.Reason)
		}
	}
}

// record is the worker's presence record now, with the lag just computed.
func (c *Consumer) record(l Lag, lagErr error) *presence.Record {
	st := c.Stats()
	r := &presence.Record{Worker: c.worker, Host: presence.Host(), PID: pid, Version: presence.Version(),
		Handled: st.Handled, Failed: st.Failed, InFlight: st.InFlight, Pending: st.Pending, Overdue: st.Overdue,
		Unserved: st.Unserved, Paused: st.Paused, At: time.Now(), Interval: c.interval}
	if a, ok := c.lease.Current(); ok {
		r.Held, r.Index, r.Replicas, r.Token = true, a.Index, a.Replicas, a.Token
	}
	if tr := c.cur.Load(); tr != nil && r.Held && tr.a.Token == r.Token && tr.a.Index == r.Index {
		r.Since = tr.t.Start()
		if tr.t.HandingOver() {
			r.HandingOver, r.Until = true, tr.t.Deadline()
		}
		if read, of := c.reading(); len(read) < of {
			r.Shards, r.Of = read, of
		}
	}
	for _, d := range st.Oldest {
		r.Oldest = append(r.Oldest, d.Seconds())
	}
	r.System = l.System
	if r.Held && r.Index == 0 {
		// One copy per group: a sharded source names a stream per shard,
		// and every worker writing them all would multiply the records.
		r.Sources = l.Sources
	}
	if lagErr == nil && l.Held != nil {
		for _, x := range l.Held {
			var m *int64
			var sec *float64
			if x.Timed && x.Known {
				sec = &x.Seconds
			} else if x.Known {
				m = &x.Messages
			}
			r.LagMessages = append(r.LagMessages, m)
			r.LagSeconds = append(r.LagSeconds, sec)
		}
	}
	if e := c.lastErr.Load(); e != nil {
		r.LastError, r.LastErrorAt = e.msg, e.at
	}
	return r
}
