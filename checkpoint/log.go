package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// Log is what a group reads, as its workers last described it
// (transport.Info): enough, with the ledger, to count the group's backlog
// with no worker running (nandi scaler, nandi status). Workers write it
// beside the ledger when a term opens the ledger and the description
// changed.
type Log struct {
	// System is transport.Info.System: "redis", "kafka", "nats", "memory".
	System string `json:"system"`
	// Sources is transport.Info.Destinations: the streams of a Redis
	// source (one per shard), a Kafka topic, a JetStream stream.
	Sources []string `json:"sources"`
	// Shards is the log's shard count when it was written.
	Shards int `json:"shards"`
	// Aligned is transport.Info.Aligned.
	Aligned bool `json:"aligned,omitempty"`
	// Subjects is transport.Info.Subjects (NATS).
	Subjects []string `json:"subjects,omitempty"`
}

// LogOf is the Log info describes.
func LogOf(info transport.Info) Log {
	return Log{System: info.System, Sources: info.Destinations, Shards: info.Shards, Aligned: info.Aligned, Subjects: info.Subjects}
}

// Equal reports whether l and o describe the same log.
func (l Log) Equal(o Log) bool {
	return l.System == o.System && slices.Equal(l.Sources, o.Sources) && l.Shards == o.Shards && l.Aligned == o.Aligned && slices.Equal(l.Subjects, o.Subjects)
}

// LogKey is the Redis key of group's Log: beside its ledger (Key), under
// the group's hash tag.
func LogKey(group string) string { return Key(group) + ":log" }

// WriteLog records what group reads.
func WriteLog(ctx context.Context, c redis.UniversalClient, group string, l Log) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if err := c.Set(ctx, LogKey(group), b, 0).Err(); err != nil {
		return fmt.Errorf("checkpoint: writing the log of %s: %w", group, err)
	}
	return nil
}

// ReadLog returns what group reads, as its workers last wrote it; nil when
// no worker of a version that writes it has opened the group's ledger.
func ReadLog(ctx context.Context, c redis.UniversalClient, group string) (*Log, error) {
	b, err := c.Get(ctx, LogKey(group)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: reading the log of %s: %w", group, err)
	}
	var l Log
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("checkpoint: the log of %s at %s is not what nandi writes (%v): delete it, and a worker writes it again at its next term", group, LogKey(group), err)
	}
	return &l, nil
}
