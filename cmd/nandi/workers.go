package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/nandi-go/nandi/presence"
)

// printWorkers prints the group's presence records, one line a worker.
func printWorkers(w io.Writer, s *Status) {
	if len(s.Workers) == 0 {
		fmt.Fprintln(w, "no worker records (none running, or all with consumer.Options.NoPresence)")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tHOLDS\tREADS\tTOKEN\tSINCE\tHANDLED\tFAILED\tIN-FLIGHT\tLAG\tOLDEST\tOVERDUE\tVERSION\tLAST ERROR")
	for _, r := range s.Workers {
		holds, since := "-", "-"
		if r.Held {
			holds = fmt.Sprintf("%d of %d", r.Index, r.Replicas)
			if !r.Since.IsZero() {
				since = ago(s.ServerTime.Sub(r.Since))
			}
		}
		if r.HandingOver {
			holds += ", handing over"
			if left := r.Until.Sub(s.ServerTime); !r.Until.IsZero() && left > 0 {
				holds += " (" + left.Round(100*time.Millisecond).String() + " left)"
			}
		}
		if r.Unserved {
			holds += " UNSERVED"
		}
		lastErr := "-"
		if r.LastError != "" {
			lastErr = clean(r.LastError)
			if !r.LastErrorAt.IsZero() {
				lastErr += " (" + ago(s.ServerTime.Sub(r.LastErrorAt)) + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%d\t%s\t%s\n", clean(r.Worker), holds, readsText(r), r.Token, since,
			r.Handled, r.Failed, r.InFlight, lagText(r), oldestText(r), r.Overdue, clean(r.Version), lastErr)
	}
	tw.Flush()
}

// readsText says which shards a worker reads: "all", or the list of an
// aligned log's shards it reads ("0,4,8 of 12").
func readsText(r presence.Record) string {
	if !r.Held {
		return "-"
	}
	if len(r.Shards) == 0 {
		return "all"
	}
	parts := make([]string, len(r.Shards))
	for i, s := range r.Shards {
		parts[i] = strconv.Itoa(s)
	}
	return strings.Join(parts, ",") + " of " + strconv.Itoa(r.Of)
}

// lagText is a record's largest lag over its shards.
func lagText(r presence.Record) string {
	var msgs int64 = -1
	secs := -1.0
	for _, m := range r.LagMessages {
		if m != nil {
			msgs = max(msgs, *m)
		}
	}
	for _, s := range r.LagSeconds {
		if s != nil {
			secs = max(secs, *s)
		}
	}
	switch {
	case secs >= 0:
		return strconv.FormatFloat(secs, 'f', 1, 64) + "s"
	case msgs >= 0:
		return strconv.FormatInt(msgs, 10)
	}
	return "-"
}

// oldestText is the age of a record's oldest unfinished task.
func oldestText(r presence.Record) string {
	oldest := 0.0
	for _, o := range r.Oldest {
		oldest = max(oldest, o)
	}
	if len(r.Oldest) == 0 {
		return "-"
	}
	return strconv.FormatFloat(oldest, 'f', 1, 64) + "s"
}

// membership says who joined and who left since the workers in seen.
func membership(seen map[string]bool, now []presence.Record) []string {
	if seen == nil {
		return nil
	}
	var joined, left []string
	cur := map[string]bool{}
	for _, r := range now {
		cur[r.Worker] = true
		if !seen[r.Worker] {
			joined = append(joined, clean(r.Worker))
		}
	}
	for id := range seen {
		if !cur[id] {
			left = append(left, clean(id))
		}
	}
	sort.Strings(joined)
	sort.Strings(left)
	var out []string
	if len(joined) > 0 {
		out = append(out, "joined: "+strings.Join(joined, ", "))
	}
	if len(left) > 0 {
		out = append(out, "left: "+strings.Join(left, ", "))
	}
	return out
}

// clean makes text a worker wrote safe for a terminal: control
// characters (escape sequences among them) are shown quoted.
func clean(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == unicode.ReplacementChar }) < 0 {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// ago says how long ago, to a tenth of a second under a minute.
func ago(d time.Duration) string {
	if d < time.Minute {
		return d.Round(100*time.Millisecond).String() + " ago"
	}
	return d.Round(time.Second).String() + " ago"
}
