package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nandi-go/nandi/partition"
	"github.com/redis/go-redis/v9"
)

// TTLIntervals is how many lease intervals a record outlives its last
// write.
const TTLIntervals = 3

// Record is one worker's account of itself.
type Record struct {
	Worker  string `json:"worker"`  // the worker's id (consumer.Options.WorkerID, or host, pod and pid)
	Host    string `json:"host"`    // the host (or pod) it runs on
	PID     int    `json:"pid"`     // its process id
	Version string `json:"version"` // nandi's module version in the worker's binary

	// Held is true while the worker holds a share: Index of Replicas,
	// under Token, since Since (the start of its term).
	Held     bool      `json:"held"`
	Index    int       `json:"index"`
	Replicas int       `json:"replicas"`
	Token    int64     `json:"token,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	// Shards are the shards the worker reads (of Of), when its source is
	// an aligned log that it reads only part of; empty when it reads them
	// all.
	Shards []int `json:"reading,omitempty"`
	Of     int   `json:"of,omitempty"`
	// HandingOver is true while the share is handed over: the mapping
	// changed, so the lease is no longer renewed and is kept to its cap,
	// Until, half a gap before the new mapping's holders may start
	// (partition.Term.HandingOver).
	HandingOver bool      `json:"handing_over,omitempty"`
	Until       time.Time `json:"until,omitzero"`

	Handled  int64 `json:"handled"`   // tasks done since the worker started
	Failed   int64 `json:"failed"`    // failed attempts since the worker started
	InFlight int64 `json:"in_flight"` // handler calls running now
	Pending  int64 `json:"pending"`   // tasks taken and unfinished
	Overdue  int64 `json:"overdue"`   // handlers still running after their term
	Unserved bool  `json:"unserved"`  // holding a share it cannot serve (source or checkpoints will not open)

	// Per shard of the log served: how far the index's checkpoint is
	// behind the log's end (LagMessages for offsets, LagSeconds for Redis
	// stream entry times; nil, null in JSON, where unknown), and the age of its oldest
	// unfinished task. The log's end is as of the consumer's last
	// description of it (at most consumer.Options.DescribeInterval old).
	LagMessages []*int64   `json:"lag_messages,omitempty"`
	LagSeconds  []*float64 `json:"lag_seconds,omitempty"`
	Oldest      []float64  `json:"oldest_seconds,omitempty"`
	// System and Sources name the log the worker reads: its system
	// ("redis", "kafka", "nats") and its streams, topic or subjects (one
	// per shard, or one for all: transport.Info.Destinations). Sources is
	// in the record of index 0's holder only: one copy per group.
	System  string   `json:"system,omitempty"`
	Sources []string `json:"sources,omitempty"`

	LastError   string    `json:"last_error,omitempty"`   // the last failed attempt's error, cut to 300 bytes
	LastErrorAt time.Time `json:"last_error_at,omitzero"` // when it failed

	Paused bool `json:"pausing,omitempty"` // the group is paused and this worker starts nothing

	At       time.Time     `json:"at"`          // when the worker wrote this
	Interval time.Duration `json:"interval_ns"` // the lease's interval
}

// SetKey is the sorted set of a group's workers.
func SetKey(group string) string { return partition.KeyPrefix(group) + "presence" }

// RecordKey is the key of one worker's record.
func RecordKey(group, worker string) string { return SetKey(group) + ":" + worker }

// MaxError is the most bytes of LastError kept.
const MaxError = 300

// Write stores r for group, to expire after ttl: one pipelined round trip
// (SET PX, ZADD, ZREMRANGEBYSCORE of the expired, PEXPIRE of the set).
func Write(ctx context.Context, c redis.Cmdable, group string, r *Record, ttl time.Duration) error {
	if r.Worker == "" {
		return errors.New("presence: a record needs a worker id")
	}
	if len(r.LastError) > MaxError {
		r.LastError = r.LastError[:MaxError]
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		queue(ctx, p, group, r.Worker, b, ttl)
		return nil
	})
	return err
}

func queue(ctx context.Context, p redis.Pipeliner, group, worker string, b []byte, ttl time.Duration) {
	now := time.Now()
	expires := now.Add(ttl).UnixMilli()
	p.Set(ctx, RecordKey(group, worker), b, ttl)
	p.ZAdd(ctx, SetKey(group), redis.Z{Score: float64(expires), Member: worker})
	p.ZRemRangeByScore(ctx, SetKey(group), "-inf", "("+strconv.FormatInt(now.UnixMilli(), 10))
	p.PExpire(ctx, SetKey(group), ttl)
}

// Remove deletes worker's record at once (a clean stop).
func Remove(ctx context.Context, c redis.Cmdable, group, worker string) error {
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, RecordKey(group, worker))
		p.ZRem(ctx, SetKey(group), worker)
		return nil
	})
	return err
}

// Read returns the records of group's workers that have not expired,
// sorted by index among holders, then by worker id. It never writes. A
// record that cannot be decoded comes back with only its Worker set and
// LastError saying so.
func Read(ctx context.Context, c redis.Cmdable, group string) ([]Record, error) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	ids, err := c.ZRangeByScore(ctx, SetKey(group), &redis.ZRangeBy{Min: now, Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("presence: reading %s: %w", SetKey(group), err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = RecordKey(group, id)
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("presence: reading the records of %s: %w", SetKey(group), err)
	}
	var out []Record
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // expired between the two reads
		}
		var r Record
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			r = Record{Worker: ids[i], LastError: "presence: unreadable record: " + err.Error()}
		}
		r.Worker = ids[i]
		out = append(out, r)
	}
	Sort(out)
	return out, nil
}

// Sort orders records: holders by index, then the others, by worker id.
func Sort(rs []Record) {
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Held != b.Held {
			return a.Held
		}
		if a.Held && a.Index != b.Index {
			return a.Index < b.Index
		}
		return a.Worker < b.Worker
	})
}

var (
	seq       atomic.Int64
	hostOnce  sync.Once
	host      string
	modVerOne sync.Once
	modVer    string
)

// Host is the worker's host name: a Kubernetes pod's name.
func Host() string {
	hostOnce.Do(func() {
		host, _ = os.Hostname()
		if host == "" {
			host = "unknown"
		}
	})
	return host
}

// NewWorkerID returns a worker id distinct within the process: host:pid,
// and host:pid#n for the n-th (n > 1).
func NewWorkerID() string {
	n := seq.Add(1)
	id := Host() + ":" + strconv.Itoa(os.Getpid())
	if n > 1 {
		id += "#" + strconv.FormatInt(n, 10)
	}
	return id
}

// Version is the version of nandi's module in this binary, "(devel)"
// when built from its own tree.
func Version() string {
	modVerOne.Do(func() {
		modVer = "(unknown)"
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		const mod = "github.com/nandi-go/nandi"
		if bi.Main.Path == mod {
			modVer = bi.Main.Version
			return
		}
		for _, d := range bi.Deps {
			if d.Path == mod {
				modVer = d.Version
				return
			}
		}
	})
	return modVer
}
