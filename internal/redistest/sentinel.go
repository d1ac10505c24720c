package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the Sentinels of StartSentinels monitor.
const MasterName = "nandi"

// Sentinels is a master, its replicas and the Sentinels (redis-server
// --sentinel) that watch them, all local processes.
type Sentinels struct {
	Sentinels []*Server
	Nodes     []*Server // the master at start first, then its replicas
	t         testing.TB
}

// StartSentinels starts a master with replicas replicas and n Sentinels
// (quorum n/2+1) that declare a master down after 500ms without an answer,
// and waits until every Sentinel knows every replica and every other
// Sentinel.
func StartSentinels(t testing.TB, replicas, n int) *Sentinels {
	t.Helper()
	master := Start(t)
	master.needProcess("watch with Sentinels")
	ss := &Sentinels{t: t, Nodes: []*Server{master}}
	for range replicas {
		ss.Nodes = append(ss.Nodes, StartReplica(t, master))
	}
	host, port, _ := net.SplitHostPort(master.Addr())
	for range n {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %s %s %s %d\n"+
			"sentinel down-after-milliseconds %s 500\n"+
			"sentinel failover-timeout %s 3000\n"+
			"sentinel parallel-syncs %s 1\n", MasterName, host, port, n/2+1, MasterName, MasterName, MasterName)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		ss.Sentinels = append(ss.Sentinels, start(t, []string{conf, "--sentinel"}, nil))
	}
	WaitFor(t, 20*time.Second, "every Sentinel to know every replica and every other Sentinel", func() bool {
		for _, s := range ss.Sentinels {
			v, err := s.Do("SENTINEL", "MASTER", MasterName)
			if err != nil {
				return false
			}
			m := fields(v)
			if m["num-slaves"] != fmt.Sprint(replicas) || m["num-other-sentinels"] != fmt.Sprint(n-1) {
				return false
			}
		}
		return true
	})
	return ss
}

// fields turns the reply of SENTINEL MASTER into a map.
func fields(v any) map[string]string {
	out := map[string]string{}
	switch r := v.(type) {
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			out[fmt.Sprint(r[i])] = fmt.Sprint(r[i+1])
		}
	case map[any]any:
		for k, x := range r {
			out[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	}
	return out
}

// Addrs returns the Sentinels' addresses.
func (ss *Sentinels) Addrs() []string {
	var out []string
	for _, s := range ss.Sentinels {
		out = append(out, s.Addr())
	}
	return out
}

// URL is the group as a go-redis failover URL
// (redis://sentinel?master_name=...&addr=other-sentinel...).
func (ss *Sentinels) URL() string {
	addrs := ss.Addrs()
	u := "redis://" + addrs[0] + "?master_name=" + MasterName
	for _, a := range addrs[1:] {
		u += "&addr=" + a
	}
	return u
}

// Client returns a FailoverClient, closed when the test ends.
func (ss *Sentinels) Client(opts ...func(*redis.FailoverOptions)) *redis.Client {
	o := &redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: ss.Addrs()}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewFailoverClient(o)
	ss.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Master returns the node the Sentinels name master now.
func (ss *Sentinels) Master() *Server {
	ss.t.Helper()
	addr, err := ss.masterAddr()
	if err != nil {
		ss.t.Fatalf("redistest: asking the Sentinels for the master: %v", err)
	}
	for _, n := range ss.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	ss.t.Fatalf("redistest: the Sentinels name %s master, which is none of the nodes", addr)
	return nil
}

func (ss *Sentinels) masterAddr() (string, error) {
	var lastErr error
	for _, s := range ss.Sentinels {
		v, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName)
		if err != nil {
			lastErr = err
			continue
		}
		if r, ok := v.([]any); ok && len(r) == 2 {
			return net.JoinHostPort(fmt.Sprint(r[0]), fmt.Sprint(r[1])), nil
		}
	}
	return "", lastErr
}

// WaitFailover waits until the Sentinels have promoted another node than
// old, and it answers as a master; it returns the new master.
func (ss *Sentinels) WaitFailover(old *Server) *Server {
	ss.t.Helper()
	var m string
	WaitFor(ss.t, 30*time.Second, "the Sentinels to promote a replica", func() bool {
		addr, err := ss.masterAddr()
		if err != nil || addr == old.Addr() {
			return false
		}
		m = addr
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		defer c.Close()
		role, err := c.Do(context.Background(), "ROLE").Slice()
		return err == nil && len(role) > 0 && strings.EqualFold(fmt.Sprint(role[0]), "master")
	})
	for _, n := range ss.Nodes {
		if n.Addr() == m {
			return n
		}
	}
	ss.t.Fatalf("redistest: the Sentinels promoted %s, which is none of the nodes", m)
	return nil
}
