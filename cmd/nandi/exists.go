package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/consumer"
	"github.com/nandi-go/nandi/deadletter"
	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/presence"
	"github.com/redis/go-redis/v9"
)

// groupKeys are the keys that show a group exists (groupSuffixes, by the
// packages that own them), all under the group's hash tag: one EXISTS
// answers for all of them, on a Redis Cluster too.
func groupKeys(group string) []string {
	return []string{partition.Key(group), checkpoint.Key(group), deadletter.Stream(group), consumer.PauseKey(group), presence.SetKey(group)}
}

// noSuchGroup is the error of a command or page action on a name that has
// none of a group's keys: it names the nearest group that exists, or the
// groups there are.
type noSuchGroup struct {
	group string
	known []string
}

func (e *noSuchGroup) Error() string {
	msg := fmt.Sprintf("no group %q on this Redis (none of its keys: lease, checkpoints, dead letters, pause, workers)", e.group)
	switch {
	case len(e.known) == 0:
		return msg + "; there is no group on it at all (check -redis and its database)"
	case nearest(e.group, e.known) != "":
		return msg + fmt.Sprintf("; did you mean %q?", nearest(e.group, e.known))
	case len(e.known) <= 10:
		return msg + "; the groups are: " + strings.Join(e.known, ", ")
	}
	return msg + fmt.Sprintf("; there are %d groups: nandi groups lists them", len(e.known))
}

// checkGroup returns a *noSuchGroup unless group has at least one of its
// keys.
func checkGroup(ctx context.Context, c redis.UniversalClient, group string) error {
	n, err := c.Exists(ctx, groupKeys(group)...).Result()
	if err != nil {
		return fmt.Errorf("looking for group %q: %w", group, err)
	}
	if n > 0 {
		return nil
	}
	known, err := findGroups(ctx, c, groupSuffixes)
	if err != nil {
		return err
	}
	return &noSuchGroup{group: group, known: known}
}

// nearest returns the name of known closest to name, if it is close
// enough to be a typo (an edit distance of at most a third of its length,
// and at most 3), else "".
func nearest(name string, known []string) string {
	best, bestD := "", 4
	for _, k := range known {
		if d := editDistance(name, k); d < bestD && d*3 <= max(len(name), 3) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
