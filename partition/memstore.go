package partition

import (
	"errors"
	"strconv"
	"sync"
	"time"
)

// memStore is an in-memory store with the script's semantics (register.lua),
// on the process clock, so that under testing/synctest it runs on fake
// time. It is for tests of pure logic; the guarantees are proven against a
// real redis-server in the integration tests.
type memStore struct {
	mu       sync.Mutex
	skew     time.Duration // the store's clock runs this far ahead of the process clock
	hasMeta  bool
	iv, ppm  int64
	tmax     int64
	nonce    string
	run      int // restarts: part of the generation, as run_id is
	counters map[int64]int
	regs     map[int64]map[string]int // interval -> token -> 1-based index
	holders  map[int64]map[int]string // interval -> 1-based index -> token
	free     map[int64]int            // interval -> no index below is free for a newcomer
	executed int
}

func newMemStore() *memStore {
	return &memStore{counters: map[int64]int{}, regs: map[int64]map[string]int{}, holders: map[int64]map[int]string{}, free: map[int64]int{}}
}

var errDropped = errors.New("memstore: reply dropped")

// restart loses every key and changes the run id, as a redis-server
// restarted without persistence does.
func (s *memStore) restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hasMeta, s.tmax, s.nonce = false, 0, ""
	s.counters, s.regs, s.holders, s.free = map[int64]int{}, map[int64]map[string]int{}, map[int64]map[int]string{}, map[int64]int{}
	s.run++
}

// step moves the store's clock by d.
func (s *memStore) step(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.skew += d
}

func (s *memStore) executedCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.executed
}

func (s *memStore) count(n int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counters[n]
}

func (s *memStore) exec(iv, ppm int64, c call) (reply, error) {
	token, nonce := c.token, c.nonce
	s.mu.Lock()
	defer s.mu.Unlock()
	s.executed++
	if s.hasMeta && (s.iv != iv || s.ppm != ppm) {
		return reply{}, &SettingsError{GroupInterval: time.Duration(s.iv) * time.Microsecond, GroupGap: float64(s.ppm) / 1e6}
	}
	T := time.Now().Add(s.skew).UnixMicro()
	T = max(T, s.tmax)
	N := T / iv
	o := T - N*iv
	if !s.hasMeta || s.nonce == "" {
		s.nonce = nonce
	}
	s.hasMeta, s.iv, s.ppm, s.tmax = true, iv, ppm, T
	gen := s.nonce + ":" + strconv.Itoa(s.run)
	// Old intervals expire.
	for n := range s.counters {
		if n < N-4 {
			delete(s.counters, n)
			delete(s.regs, n)
			delete(s.holders, n)
			delete(s.free, n)
		}
	}
	n := N
	idx, ok := s.regs[N][token]
	if !ok {
		idx, ok = s.regs[N-1][token]
		n = N - 1
	}
	if !ok {
		lo := gapMicros(iv, ppm)
		if c.aimed < 0 || o < lo || o > iv-lo || (c.aimed > 0 && N > c.aimed+1) {
			return reply{interval: N, offset: o, now: T, gen: gen, prevCount: s.counters[N-1]}, nil
		}
		n = N
		s.counters[N]++
		if s.regs[N] == nil {
			s.regs[N] = map[string]int{}
			s.holders[N] = map[int]string{}
		}
		// The script's rule: keep the index got in N-1 when it is below
		// the count of N-1 and free in N; else the lowest index nobody got
		// in N-1 nor in N.
		want := c.want + 1
		if want >= 1 && want <= s.counters[N-1] && s.holders[N][want] == "" && s.holders[N-1][want] == c.prevToken && c.prevToken != "" {
			idx = want
		} else {
			idx = max(s.free[N], 1)
			for s.holders[N][idx] != "" || s.holders[N-1][idx] != "" {
				idx++
			}
			s.free[N] = idx + 1
		}
		s.regs[N][token] = idx
		s.holders[N][idx] = token
	}
	return reply{registered: true, interval: n, offset: o, now: T, gen: gen, index: idx - 1, prevCount: s.counters[n-1]}, nil
}
