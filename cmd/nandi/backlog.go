package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nandi-go/nandi/checkpoint"
	"github.com/nandi-go/nandi/transport"
	"github.com/nandi-go/nandi/transport/kafkatopic"
	"github.com/nandi-go/nandi/transport/natsjs"
	"github.com/nandi-go/nandi/transport/redisstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// Backlog is a group's lag in entries: per shard, the log's entries at or
// after the group's low watermark (the current epoch's lowest checkpoint
// of the shard), counted by the log itself (transport.Counter), from the
// ledger and the log alone: no worker needs to run.
type Backlog struct {
	Group  string `json:"group"`
	System string `json:"system"`
	// Entries is the sum over the shards: what KEDA scales on.
	Entries int64          `json:"entries"`
	Shards  []ShardBacklog `json:"shards"`
}

// ShardBacklog is one shard's backlog.
type ShardBacklog struct {
	Shard   int    `json:"shard"`
	Source  string `json:"source"`
	Entries int64  `json:"entries"`
}

// errNoLog is returned for a group no worker has described its log for:
// it never ran, or its workers predate the record.
var errNoLog = errors.New("no worker of the group has recorded what it reads yet")

// logs reaches the logs that groups read: Redis streams on the lease's
// Redis (or -log-redis), Kafka (-kafka) and JetStream (-nats). It keeps a
// source per group so that each counts from where it last counted (a
// Redis stream's marks).
type logs struct {
	redis   redis.UniversalClient
	kafka   []string
	natsURL string

	mu      sync.Mutex
	nc      *nats.Conn
	sources map[string]groupSource
}

type groupSource struct {
	log checkpoint.Log
	src transport.Counter
}

func (l *logs) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nc != nil {
		l.nc.Close()
	}
}

// source returns a counter over the log lg describes, the one made last
// time when lg has not changed.
func (l *logs) source(group string, lg checkpoint.Log) (transport.Counter, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gs, ok := l.sources[group]; ok && gs.log.Equal(lg) {
		return gs.src, nil
	}
	if len(lg.Sources) == 0 {
		return nil, fmt.Errorf("the recorded log of %s names no source", group)
	}
	var src transport.Counter
	var err error
	switch lg.System {
	case "redis":
		if l.redis == nil {
			return nil, fmt.Errorf("group %s reads Redis streams: give -log-redis (or -redis, when they are on the lease's Redis)", group)
		}
		src, err = redisstream.NewSharded(l.redis, lg.Sources, redisstream.Options{Unaligned: !lg.Aligned})
	case "kafka":
		if len(l.kafka) == 0 {
			return nil, fmt.Errorf("group %s reads the Kafka topic %s: give -kafka host:port[,host:port...]", group, lg.Sources[0])
		}
		src, err = kafkatopic.New(l.kafka, lg.Sources[0], kafkatopic.Options{Aligned: lg.Aligned})
	case "nats":
		if l.natsURL == "" {
			return nil, fmt.Errorf("group %s reads the JetStream stream %s: give -nats nats://host:port", group, lg.Sources[0])
		}
		if l.nc == nil {
			if l.nc, err = nats.Connect(l.natsURL, nats.Name("nandi scaler")); err != nil {
				return nil, fmt.Errorf("cannot reach NATS at %s: %v", l.natsURL, err)
			}
		}
		js, jerr := jetstream.New(l.nc)
		if jerr != nil {
			return nil, jerr
		}
		opts := natsjs.Options{Subjects: lg.Subjects}
		if lg.Shards > 1 || (lg.Aligned && len(lg.Subjects) == 1) {
			prefix, ok := strings.CutSuffix(lg.Subjects[0], ".0")
			if !ok {
				return nil, fmt.Errorf("the recorded subjects of %s (%v) are not PREFIX.0, PREFIX.1 and so on", group, lg.Subjects)
			}
			opts = natsjs.Options{Shards: len(lg.Subjects), SubjectPrefix: prefix}
		}
		src, err = natsjs.New(js, lg.Sources[0], opts)
	default:
		return nil, fmt.Errorf("group %s reads a %q log, which nandi cannot count from outside its workers", group, lg.System)
	}
	if err != nil {
		return nil, err
	}
	if l.sources == nil {
		l.sources = map[string]groupSource{}
	}
	l.sources[group] = groupSource{log: lg, src: src}
	return src, nil
}

// readBacklog counts group's backlog: its recorded log (checkpoint.ReadLog)
// from its ledger's low watermarks (all of it before the first checkpoint).
func readBacklog(ctx context.Context, lease redis.UniversalClient, l *logs, group string) (*Backlog, error) {
	lg, err := checkpoint.ReadLog(ctx, lease, group)
	if err != nil {
		return nil, err
	}
	if lg == nil {
		return nil, fmt.Errorf("group %s: %w (a worker writes %s when its first term opens the ledger)", group, errNoLog, checkpoint.LogKey(group))
	}
	st, err := checkpoint.NewRedis(lease, group).ReadLow(ctx)
	if err != nil {
		return nil, err
	}
	src, err := l.source(group, *lg)
	if err != nil {
		return nil, err
	}
	var from []transport.Position
	if st != nil && st.Current != nil {
		from = make([]transport.Position, len(st.Current.Start))
		for s := range from {
			from[s] = st.Current.Low(s)
		}
	}
	counts, err := src.Backlog(ctx, from)
	if err != nil {
		return nil, err
	}
	info := transport.Info{Destinations: lg.Sources}
	b := &Backlog{Group: group, System: lg.System, Shards: make([]ShardBacklog, len(counts))}
	for s, n := range counts {
		b.Shards[s] = ShardBacklog{Shard: s, Source: info.Destination(s), Entries: n}
		b.Entries += n
	}
	return b, nil
}
