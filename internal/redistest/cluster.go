package redistest

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of local servers.
type Cluster struct {
	Nodes []*Server // masters first, then replicas
	t     testing.TB
}

// StartCluster starts masters masters with replicas replicas each and
// waits until the cluster state is ok.
func StartCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	if src, err := find(); err != nil {
		t.Fatal(err)
	} else if src != fromBinary || cliPath == "" {
		t.Fatal("redistest: a cluster needs redis-server and redis-cli on PATH (Debian: apt-get install -y redis-server redis-tools)")
	}
	c := &Cluster{t: t}
	args := []string{"--cluster-enabled", "yes", "--cluster-node-timeout", "1000"}
	var addrs []string
	for range masters * (1 + replicas) {
		s := Start(t, append(args, "--cluster-config-file", "nodes.conf")...)
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr())
	}
	cmdArgs := append([]string{"--cluster", "create"}, addrs...)
	cmdArgs = append(cmdArgs, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command(cliPath, cmdArgs...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	WaitFor(t, 20*time.Second, "cluster_state:ok on every node", func() bool {
		for _, n := range c.Nodes {
			v, err := n.Do("CLUSTER", "INFO")
			if err != nil || !strings.Contains(v.(string), "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	if replicas > 0 {
		WaitFor(t, 20*time.Second, "every replica of the cluster to be in sync", func() bool {
			synced := 0
			for _, n := range c.Nodes {
				if n.Info("role") == "slave" && n.Info("master_link_status") == "up" {
					synced++
				}
			}
			return synced == masters*replicas
		})
	}
	return c
}

// Client returns a cluster client, closed when the test ends.
func (c *Cluster) Client(opts ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	o := &redis.ClusterOptions{}
	for _, n := range c.Nodes {
		o.Addrs = append(o.Addrs, n.Addr())
	}
	for _, f := range opts {
		f(o)
	}
	cl := redis.NewClusterClient(o)
	c.t.Cleanup(func() { _ = cl.Close() })
	if err := cl.ForEachShard(context.Background(), func(ctx context.Context, s *redis.Client) error { return s.Ping(ctx).Err() }); err != nil {
		c.t.Fatalf("redistest: cluster client: %v", err)
	}
	return cl
}

// NodeFor returns the master node that serves key's slot.
func (c *Cluster) NodeFor(key string) *Server {
	c.t.Helper()
	slot, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", key)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, n := range c.Nodes {
		v, err := n.Do("CLUSTER", "SLOTS")
		if err != nil {
			continue
		}
		for _, r := range v.([]any) {
			rr := r.([]any)
			lo, hi := rr[0].(int64), rr[1].(int64)
			if s := slot.(int64); s >= lo && s <= hi {
				master := rr[2].([]any)
				port := master[1].(int64)
				for _, m := range c.Nodes {
					if int64(m.Port()) == port {
						return m
					}
				}
			}
		}
		break
	}
	c.t.Fatalf("redistest: no node for key %q", key)
	return nil
}
