package partition

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestNewRejectsInvalidOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		opts  Options
		field string
	}{
		{Options{}, "Name"},
		{Options{Name: "a{b"}, "Name"},
		{Options{Name: "a}b"}, "Name"},
		{Options{Name: "g", Interval: 99 * time.Millisecond}, "Interval"},
		{Options{Name: "g", Interval: -time.Second}, "Interval"},
		{Options{Name: "g", Gap: -0.1}, "Gap"},
		{Options{Name: "g", Gap: 0.21}, "Gap"},
		{Options{Name: "g", Gap: 1}, "Gap"},
		{Options{Name: "g", WaitReplicas: -1}, "WaitReplicas"},
		{Options{Name: "g", WaitTimeout: -1}, "WaitTimeout"},
		// WAIT counts milliseconds and WAIT n 0 waits forever: refused.
		{Options{Name: "g", WaitReplicas: 1, WaitTimeout: 500 * time.Microsecond}, "WaitTimeout"},
	} {
		_, err := New(c, tc.opts)
		if !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v; want an error wrapping ErrInvalidOptions", tc.opts, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %q; want it to name %s", tc.opts, err, tc.field)
		}
	}
	if _, err := New(nil, Options{Name: "g"}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New(nil client) = %v; want ErrInvalidOptions", err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := New(ring, Options{Name: "g", WaitReplicas: 1}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New(ring, WaitReplicas) = %v; want ErrInvalidOptions", err)
	}
}

// The default WaitTimeout of the smallest gap (1ms of gap: 0.5ms) rounds up
// to a whole millisecond, never down to WAIT n 0.
func TestDefaultWaitTimeoutIsAWholeMillisecond(t *testing.T) {
	o := Options{Name: "g", Interval: time.Second, Gap: 0.001}.withDefaults()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	if o.WaitTimeout != time.Millisecond {
		t.Errorf("default WaitTimeout of a 1ms gap = %v; want 1ms", o.WaitTimeout)
	}
}

func TestNewFillsDefaults(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []Options{{Name: "g"}, {Name: "g", Interval: MinInterval, Gap: MaxGap}} {
		l, err := New(c, o)
		if err != nil {
			t.Fatalf("New(%+v): %v", o, err)
		}
		got := l.Options()
		if o.Interval == 0 && (got.Interval != DefaultInterval || got.Gap != DefaultGap) {
			t.Errorf("defaults: got interval %v gap %g; want %v %g", got.Interval, got.Gap, DefaultInterval, DefaultGap)
		}
	}
}

func TestAssignmentOwns(t *testing.T) {
	a := Assignment{Index: 2, Replicas: 5}
	for id := uint64(0); id < 100; id++ {
		if got, want := a.Owns(id), id%5 == 2; got != want {
			t.Fatalf("Owns(%d) = %v; want %v", id, got, want)
		}
	}
	if (Assignment{}).Owns(0) {
		t.Error("the zero Assignment owns task 0; want nothing")
	}
	// Every id has exactly one owner among the indexes of one replicas.
	for id := uint64(0); id < 1000; id++ {
		owners := 0
		for k := range 7 {
			if (Assignment{Index: k, Replicas: 7}).Owns(id) {
				owners++
			}
		}
		if owners != 1 {
			t.Fatalf("task %d has %d owners among 7; want 1", id, owners)
		}
	}
}

func FuzzOptionsValidate(f *testing.F) {
	f.Add("g", int64(5e9), 0.125, 0)
	f.Add("", int64(0), 0.0, 0)
	f.Add("{x}", int64(1e8), 0.2, 1)
	f.Fuzz(func(t *testing.T, name string, iv int64, gap float64, wait int) {
		o := Options{Name: name, Interval: time.Duration(iv), Gap: gap, WaitReplicas: wait}.withDefaults()
		err := o.validate()
		if err != nil {
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("validate: %v does not wrap ErrInvalidOptions", err)
			}
			return
		}
		lo := gapMicros(o.Interval.Microseconds(), gapPPM(o.Gap))
		if o.Interval < MinInterval || lo <= 0 || 2*lo >= o.Interval.Microseconds() || strings.ContainsAny(o.Name, "{}") || o.Name == "" {
			t.Fatalf("validate accepted %+v", o)
		}
	})
}
