package delivery

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/nandi-go/nandi/transport"
)

// announcements records what a fleet's workers said may run twice: the
// positions of the handlers a drain went on without ("handlers overdue"),
// and the tasks a term took again after a holder that did not release or
// a lost ledger ("tasks a former holder may have done"), by their
// positions and per-shard ranges. A task handled twice that is in none of
// them is a silent duplicate.
type announcements struct {
	mu        sync.Mutex
	positions map[string]bool // shard/position
	spans     []span          // a shard's first and last position
}

type span struct {
	shard       string
	first, last transport.Position
}

func newAnnouncements() *announcements {
	return &announcements{positions: map[string]bool{}}
}

// handler is a slog.Handler for a worker's consumer: it records the
// announcements and drops everything else.
func (a *announcements) handler() slog.Handler { return (*announcer)(a) }

type announcer announcements

func (h *announcer) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *announcer) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *announcer) WithGroup(string) slog.Handler                { return h }
func (h *announcer) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "handlers overdue:") && !strings.HasPrefix(r.Message, "tasks a former holder may have done") {
		return nil
	}
	a := (*announcements)(h)
	a.mu.Lock()
	defer a.mu.Unlock()
	r.Attrs(func(at slog.Attr) bool {
		vs, _ := at.Value.Any().([]string)
		switch at.Key {
		case "positions":
			for _, v := range vs {
				a.positions[v] = true
			}
		case "ranges":
			for _, v := range vs {
				shard, rest, _ := strings.Cut(v, "/")
				lo, hi, _ := strings.Cut(rest, "..")
				first, err1 := transport.ParsePosition(lo)
				last, err2 := transport.ParsePosition(hi)
				if err1 == nil && err2 == nil {
					a.spans = append(a.spans, span{shard, first, last})
				}
			}
		}
		return true
	})
	return nil
}

// said reports whether the task at p of shard s was announced.
func (a *announcements) said(s int, p transport.Position) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.positions[strconv.Itoa(s)+"/"+p.String()] {
		return true
	}
	for _, sp := range a.spans {
		if sp.shard == strconv.Itoa(s) && !p.Less(sp.first) && !sp.last.Less(p) {
			return true
		}
	}
	return false
}
