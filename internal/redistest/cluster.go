package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var clusterArgs = []string{"--cluster-enabled", "yes", "--cluster-node-timeout", "1000"}

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
	args := clusterArgs
	var addrs []string
	for range masters * (1 + replicas) {
		s := Start(t, append(args, "--cluster-config-file", "nodes.conf")...)
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr())
	}
	if masters == 1 && replicas == 0 {
		// redis-cli --cluster create wants 3 masters; one node takes every
		// slot itself.
		if _, err := c.Nodes[0].Do("CLUSTER", "ADDSLOTSRANGE", 0, 16383); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE: %v", err)
		}
	} else {
		cmdArgs := append([]string{"--cluster", "create"}, addrs...)
		cmdArgs = append(cmdArgs, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
		out, err := exec.Command(cliPath, cmdArgs...).CombinedOutput()
		if err != nil {
			t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
		}
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

// Masters returns the nodes that are masters now.
func (c *Cluster) Masters() []*Server {
	var ms []*Server
	for _, n := range c.Nodes {
		if n.alive() && n.Info("role") == "master" {
			ms = append(ms, n)
		}
	}
	return ms
}

// ReplicaOf returns a replica of master.
func (c *Cluster) ReplicaOf(master *Server) *Server {
	c.t.Helper()
	for _, n := range c.Nodes {
		if n.alive() && n.Info("role") == "slave" && n.Info("master_port") == strconv.Itoa(master.Port()) {
			return n
		}
	}
	c.t.Fatalf("redistest: no replica of %s", master.Addr())
	return nil
}

// WaitSynced waits until every replica has everything its master wrote.
func (c *Cluster) WaitSynced() {
	c.t.Helper()
	WaitFor(c.t, 10*time.Second, "every replica to catch up with its master", func() bool {
		for _, m := range c.Masters() {
			want := m.InfoSection("replication", "master_repl_offset")
			for _, n := range c.Nodes {
				if n.alive() && n.Info("role") == "slave" && n.Info("master_port") == strconv.Itoa(m.Port()) &&
					n.InfoSection("replication", "slave_repl_offset") != want {
					return false
				}
			}
		}
		return true
	})
}

// MigrateSlot moves key's slot from one master to another the way a
// resharding tool does, one key per MIGRATE with a pause between keys, so
// that clients meet the slot half moved (ASK and TRYAGAIN replies).
func (c *Cluster) MigrateSlot(key string, from, to *Server) {
	c.t.Helper()
	must := func(v any, err error) any {
		c.t.Helper()
		if err != nil {
			c.t.Fatalf("redistest: migrating the slot of %q: %v", key, err)
		}
		return v
	}
	slot := must(from.Do("CLUSTER", "KEYSLOT", key))
	fromID := must(from.Do("CLUSTER", "MYID"))
	toID := must(to.Do("CLUSTER", "MYID"))
	must(to.Do("CLUSTER", "SETSLOT", slot, "IMPORTING", fromID))
	must(from.Do("CLUSTER", "SETSLOT", slot, "MIGRATING", toID))
	host, port, _ := net.SplitHostPort(to.Addr())
	for {
		keys := must(from.Do("CLUSTER", "GETKEYSINSLOT", slot, 10)).([]any)
		if len(keys) == 0 {
			break
		}
		for _, k := range keys {
			if _, err := from.Do("MIGRATE", host, port, "", 0, 5000, "KEYS", k); err != nil && !strings.Contains(err.Error(), "NOKEY") {
				c.t.Fatalf("redistest: MIGRATE %v: %v", k, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The target first, as Redis asks, then every other master.
	must(to.Do("CLUSTER", "SETSLOT", slot, "NODE", toID))
	for _, n := range c.Masters() {
		if n == to {
			continue
		}
		must(n.Do("CLUSTER", "SETSLOT", slot, "NODE", toID))
	}
}

// Takeover makes this replica its master's master at once (CLUSTER
// FAILOVER TAKEOVER), without the master's agreement: for a master that
// was killed.
func (s *Server) Takeover() {
	if _, err := s.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil {
		s.t.Fatalf("redistest: CLUSTER FAILOVER TAKEOVER on %s: %v", s.Addr(), err)
	}
}

// AddReplica starts a new node, has it meet the cluster and replicate
// master, and waits until it is in sync.
func (c *Cluster) AddReplica(master *Server) *Server {
	c.t.Helper()
	n := Start(c.t, append(clusterArgs, "--cluster-config-file", "nodes.conf")...)
	host, port, _ := net.SplitHostPort(master.Addr())
	if _, err := n.Do("CLUSTER", "MEET", host, port); err != nil {
		c.t.Fatalf("redistest: CLUSTER MEET: %v", err)
	}
	id, err := master.Do("CLUSTER", "MYID")
	if err != nil {
		c.t.Fatal(err)
	}
	WaitFor(c.t, 10*time.Second, "the new node to learn of its master", func() bool {
		_, err := n.Do("CLUSTER", "REPLICATE", id) // "Unknown node" until the gossip reaches it
		return err == nil
	})
	WaitFor(c.t, 10*time.Second, "the new node to sync with its master", func() bool {
		return n.Info("master_link_status") == "up"
	})
	c.Nodes = append(c.Nodes, n)
	return n
}
