package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/partition"
	"github.com/redis/go-redis/v9"
)

// PauseKey is the key that pauses a group while it exists.
func PauseKey(group string) string { return partition.KeyPrefix(group) + "paused" }

// PauseState is what a pause says: since when, and why.
type PauseState struct {
	Since  time.Time `json:"since"`            // when the group was paused (the first Pause of a spell)
	Reason string    `json:"reason,omitempty"` // why, as nandi pause -reason said
}

// Pause pauses group: every worker lets what runs finish and starts
// nothing more, while it keeps its lease and its place (resuming costs no
// rebalance), until Resume. Each worker reads the pause once per lease
// interval, before anything else it does then and on its own timeout (a
// source whose Info hangs cannot hold it up), so a pause takes effect
// within an interval. Pausing a paused group keeps its first Since and
// takes the new reason (ReadPause before it tells what it was).
func Pause(ctx context.Context, c redis.Cmdable, group, reason string) (PauseState, error) {
	st := PauseState{Since: time.Now().UTC().Truncate(time.Millisecond), Reason: reason}
	since, err := st.Since.MarshalText()
	if err != nil {
		return PauseState{}, err
	}
	v, err := pauseScript.Run(ctx, c, []string{PauseKey(group)}, string(since), reason).Text()
	if err != nil {
		return PauseState{}, fmt.Errorf("consumer: pause %s: %w", group, err)
	}
	return parsePause([]byte(v)), nil
}

// pauseScript sets the pause to ARGV[2] as its reason, keeping the Since
// of a pause already there (ARGV[1] otherwise), and returns what it set.
var pauseScript = redis.NewScript(`
local st = {since = ARGV[1]}
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, old = pcall(cjson.decode, cur)
  if ok and type(old) == 'table' and type(old.since) == 'string' then st.since = old.since end
end
if ARGV[2] ~= '' then st.reason = ARGV[2] end
local v = cjson.encode(st)
redis.call('SET', KEYS[1], v)
return v`)

// Resume ends group's pause; resumed reports whether it was paused.
func Resume(ctx context.Context, c redis.Cmdable, group string) (resumed bool, err error) {
	n, err := c.Del(ctx, PauseKey(group)).Result()
	if err != nil {
		return false, fmt.Errorf("consumer: resume %s: %w", group, err)
	}
	return n > 0, nil
}

// ReadPause reports whether group is paused, and since when.
func ReadPause(ctx context.Context, c redis.Cmdable, group string) (PauseState, bool, error) {
	b, err := c.Get(ctx, PauseKey(group)).Bytes()
	if errors.Is(err, redis.Nil) {
		return PauseState{}, false, nil
	}
	if err != nil {
		return PauseState{}, false, fmt.Errorf("consumer: read the pause of %s: %w", group, err)
	}
	return parsePause(b), true, nil
}

// parsePause reads a pause key's value; one written by hand (any value)
// pauses too, since an unknown time.
func parsePause(b []byte) PauseState {
	var st PauseState
	if json.Unmarshal(b, &st) != nil {
		return PauseState{Reason: string(b)}
	}
	return st
}

// pauser is a worker's view of its group's pause.
type pauser struct {
	on     atomic.Bool // paused, for the per-task check
	mu     sync.Mutex
	paused bool
	since  time.Time
	resume chan struct{} // closed at the resume
}

func (p *pauser) set(paused bool, since time.Time) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if paused == p.paused {
		return false
	}
	p.paused = paused
	p.on.Store(paused)
	if paused {
		p.since, p.resume = since, make(chan struct{})
	} else {
		p.since = time.Time{}
		close(p.resume)
	}
	return true
}

func (p *pauser) state() (bool, time.Time, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.since, p.resume
}

// wait returns once the group is not paused (true) or ctx has ended
// (false).
func (p *pauser) wait(ctx context.Context) bool {
	for {
		paused, _, resume := p.state()
		if !paused {
			return true
		}
		select {
		case <-resume:
		case <-ctx.Done():
			return false
		}
	}
}
