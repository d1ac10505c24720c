package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nandi-go/nandi/partition"
	"github.com/nandi-go/nandi/transport"
	"github.com/redis/go-redis/v9"
)

// An aligned source that is not a log (NATS core with a subject per
// shard) has no checkpoint ledger to realign: its group keeps the news
// that it is misaligned in a key of its own. The worker that first reads
// a message in a subject its id does not belong to says so at Error,
// counts it (Stats.Misplaced) and sets the key; every worker reads the
// key each interval with the pause, and while it exists subscribes to
// every shard (each message then reaches its owner, as on an unaligned
// source). Delete it (ClearMisaligned) once the producers are fixed; the
// workers then subscribe to their shards only again.

// MisalignedKey is the key that makes an aligned group that is not a log
// read every shard while it exists.
func MisalignedKey(group string) string { return partition.KeyPrefix(group) + "misaligned" }

// Misalignment is the first misplaced message that set MisalignedKey.
type Misalignment struct {
	Since       time.Time `json:"since"`       // when it was found
	Destination string    `json:"destination"` // the subject it was read from
	Shard       int       `json:"shard"`       // the shard of that subject
	Key         string    `json:"key"`         // the message's key
	BelongsTo   int       `json:"belongs_to"`  // the shard its id belongs to
}

// ReadMisaligned reports whether group reads every shard because a
// misplaced message was found, and which one.
func ReadMisaligned(ctx context.Context, c redis.Cmdable, group string) (Misalignment, bool, error) {
	b, err := c.Get(ctx, MisalignedKey(group)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Misalignment{}, false, nil
	}
	if err != nil {
		return Misalignment{}, false, fmt.Errorf("consumer: read the misalignment of %s: %w", group, err)
	}
	return parseMisaligned(b), true, nil
}

// ClearMisaligned deletes group's MisalignedKey: once its producers place
// every message as the source declares, its workers read their shards
// only again (within an interval).
func ClearMisaligned(ctx context.Context, c redis.Cmdable, group string) (cleared bool, err error) {
	n, err := c.Del(ctx, MisalignedKey(group)).Result()
	if err != nil {
		return false, fmt.Errorf("consumer: clear the misalignment of %s: %w", group, err)
	}
	return n > 0, nil
}

func parseMisaligned(b []byte) Misalignment {
	var m Misalignment
	if json.Unmarshal(b, &m) != nil {
		m.Key = string(b)
	}
	return m
}

// placedLossy checks a message of an aligned source that is not a log: it
// must lie in the shard its id belongs to. The first one that does not is
// said at Error and recorded for the group (MisalignedKey); every one is
// counted. It reports whether m was misplaced.
func (rd *reading) placedLossy(m *transport.Message, id uint64) bool {
	n := uint64(len(rd.shards))
	if n <= 1 || id%n == uint64(m.Shard) {
		return true
	}
	rd.sh.stats.misplaced.Add(1)
	if !rd.sh.misaligned.CompareAndSwap(false, true) {
		return false
	}
	mis := Misalignment{Since: time.Now().UTC().Truncate(time.Millisecond), Destination: rd.info.Destination(m.Shard), Shard: m.Shard, Key: m.Key, BelongsTo: int(id % n)}
	rd.log.ErrorContext(rd.ctx, "a message in a subject its id does not belong to: the source is not aligned as it declares; the group now subscribes to every subject, so that each message reaches its owner (fix the producers, then nandi's consumer.ClearMisaligned)",
		"destination", mis.Destination, "shard", m.Shard, "key", m.Key, "belongs_to_shard", mis.BelongsTo, "shards", n)
	if c := rd.sh.client; c != nil {
		b, _ := json.Marshal(mis)
		ctx, cancel := context.WithTimeout(rd.taking, rd.sh.interval/4)
		defer cancel()
		if err := c.SetNX(ctx, MisalignedKey(rd.sh.group), b, 0).Err(); err != nil {
			rd.log.WarnContext(rd.ctx, "recording the misalignment for the group failed; this worker subscribes to every subject, the next misplaced message tries again", "err", err)
			rd.sh.misaligned.Store(false)
			rd.sh.misalignedHere.Store(true)
		}
	}
	return false
}

// noteMisaligned applies MisalignedKey as read (a failed read changes
// nothing): when it appears or goes, the term being served, if it
// subscribes otherwise, opens again.
func (c *Consumer) noteMisaligned(cmd *redis.StringCmd) {
	b, err := cmd.Bytes()
	var now bool
	switch {
	case errors.Is(err, redis.Nil):
	case err == nil:
		now = true
	default:
		return
	}
	now = now || c.misalignedHere.Load()
	changed := c.misaligned.Swap(now) != now
	tr := c.cur.Load()
	if tr == nil || tr.info.Log || !tr.info.Aligned {
		return
	}
	if changed && now {
		m := parseMisaligned(b)
		c.log.Warn("the group is misaligned (a message in a subject its id does not belong to): subscribing to every subject", "destination", m.Destination, "key", m.Key, "since", m.Since)
	} else if changed {
		c.log.Info("the group's misalignment was cleared: subscribing to this worker's subjects only")
	}
	if tr.allShards != now {
		why := "the group's misalignment changed"
		if tr.reopen.CompareAndSwap(nil, &why) {
			tr.stop()
		}
	}
}
