package consumer

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"github.com/nandi-go/nandi/transport"
)

// FuzzID: a decimal uint64 key is its own id, any other key its FNV-1a
// hash, so every worker (in any language) computes the same owner.
func FuzzID(f *testing.F) {
	for _, k := range []string{"42", "0042", "18446744073709551615", "18446744073709551616", "99999999999999999999", "-1", "+1", "", "user:7", " 7", "0000000000000000000000000042", "1_000", "0x10", "00000000000000000000018446744073709551616"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		got := ID(key)
		if n, err := strconv.ParseUint(key, 10, 64); err == nil {
			if got != n {
				t.Fatalf("ID(%q) = %d, want %d", key, got, n)
			}
			return
		}
		h := fnv.New64a()
		h.Write([]byte(key))
		if got != h.Sum64() {
			t.Fatalf("ID(%q) = %d, want its FNV-1a hash %d", key, got, h.Sum64())
		}
	})
}

// FuzzOptionsValidate: options that validate are usable (every bound the
// consumer relies on holds after defaults), and every refusal wraps
// ErrInvalidOptions.
func FuzzOptionsValidate(f *testing.F) {
	f.Add(0, int64(0), int64(0), int64(0), 0, false, int64(0), 0, 0, int64(0))
	f.Add(4, int64(time.Second), int64(time.Millisecond), int64(time.Second), 3, true, int64(time.Second), 100, 10, int64(time.Minute))
	f.Add(-1, int64(-1), int64(-1), int64(-2), -1, false, int64(-1), -1, -1, int64(-1))
	const gap, interval = 625 * time.Millisecond, 5 * time.Second
	f.Fuzz(func(t *testing.T, conc int, drain, rmin, rmax int64, attempts int, dead bool, cpi int64, cpe, pending int, shutdown int64) {
		o := Options{Concurrency: conc, MinTaskTime: time.Duration(drain), RetryMin: time.Duration(rmin), RetryMax: time.Duration(rmax),
			MaxAttempts: attempts, CheckpointInterval: time.Duration(cpi), CheckpointEvery: cpe, MaxPending: pending, ShutdownTimeout: time.Duration(shutdown)}
		if dead {
			o.DeadLetter = func(context.Context, *transport.Message, error) error { return nil }
		}
		o = o.withDefaults(gap, interval)
		err := o.validate(gap, interval)
		if err != nil {
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("%v does not wrap ErrInvalidOptions", err)
			}
			return
		}
		switch {
		case o.Concurrency < 1, o.MinTaskTime <= 0, o.MinTaskTime > interval/2, o.RetryMin < 0, o.RetryMax < o.RetryMin,
			o.MaxAttempts < 0, o.CheckpointInterval <= 0, o.CheckpointEvery <= 0,
			o.MaxPending < 1, o.ShutdownTimeout < 0, o.Logger == nil:
			t.Fatalf("accepted %+v", o)
		}
	})
}
