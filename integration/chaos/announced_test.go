package chaos

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/nandi-go/nandi/transport"
)

// announced reads what the workers' logs (worker-N.log) said may run
// twice: every overdue handler's position ("handlers overdue"), and the
// tasks a term took again after a holder that did not release or a lost
// ledger ("tasks a former holder may have done": their positions and
// per-shard ranges). It returns whether the task at pos of shard was
// among them.
func (f *fleet) announced() func(shard int, pos string) bool {
	files, _ := filepath.Glob(filepath.Join(f.dir, "worker-*.log"))
	positions := map[string]bool{}
	type span struct {
		shard       string
		first, last transport.Position
	}
	var spans []span
	attr := regexp.MustCompile(`(positions|ranges)="?\[([^\]]*)\]`)
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, "handlers overdue:") && !strings.Contains(line, "tasks a former holder may have done") {
				continue
			}
			for _, m := range attr.FindAllStringSubmatch(line, -1) {
				for _, v := range strings.Fields(m[2]) {
					if m[1] == "positions" {
						positions[v] = true
						continue
					}
					shard, rest, _ := strings.Cut(v, "/")
					lo, hi, _ := strings.Cut(rest, "..")
					first, err1 := transport.ParsePosition(lo)
					last, err2 := transport.ParsePosition(hi)
					if err1 == nil && err2 == nil {
						spans = append(spans, span{shard, first, last})
					}
				}
			}
		}
	}
	return func(shard int, pos string) bool {
		s := strconv.Itoa(shard)
		if positions[s+"/"+pos] {
			return true
		}
		p, err := transport.ParsePosition(pos)
		if err != nil {
			return false
		}
		for _, sp := range spans {
			if sp.shard == s && !p.Less(sp.first) && !sp.last.Less(p) {
				return true
			}
		}
		return false
	}
}

// unannounced returns the tasks that took effect more than once (got,
// from the sink) that no worker announced, by their start records'
// places.
func (f *fleet) unannounced(h *history, got map[string]int) (repeated int, silent []string) {
	said := f.announced()
	places := map[string][]record{}
	for _, r := range h.starts {
		k := taskKey(r.ID, r.Seq)
		places[k] = append(places[k], r)
	}
	for k, n := range got {
		if n < 2 {
			continue
		}
		repeated++
		ok := false
		for _, r := range places[k] {
			ok = ok || said(r.Shard, r.Pos)
		}
		if !ok {
			silent = append(silent, k)
		}
	}
	return repeated, silent
}
