package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// urlForms is what -redis accepts, for the flags' help.
const urlForms = `redis://[user:pass@]host:port[/db] (a server, or any node of a Redis Cluster: found out with INFO cluster); ` +
	`redis+cluster://host:port[?addr=host2:port2...] (a Cluster); ` +
	`redis://sentinel:port?master_name=NAME[&addr=sentinel2:port...] or redis+sentinel://... (Sentinel); rediss for TLS`

// connect returns a client for a -redis URL: a single server, a Redis
// Cluster or a master behind Sentinels, in go-redis's URL forms
// (ParseURL, ParseClusterURL, ParseFailoverURL). A plain redis:// URL
// that names a node of a Cluster gets a cluster client, so that the
// group's keys are read wherever their slot lives.
func connect(ctx context.Context, raw string) (redis.UniversalClient, error) {
	if raw == "" {
		return nil, errors.New("-redis is required, for example -redis redis://localhost:6379/0")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("-redis %q: %w", raw, err)
	}
	base, kind, _ := strings.Cut(u.Scheme, "+")
	q := u.Query()
	switch {
	case kind == "sentinel" || q.Has("master_name"):
		if q.Get("master_name") == "" {
			return nil, fmt.Errorf("-redis %q: a Sentinel URL names the master: add ?master_name=NAME (the name in 'sentinel monitor NAME ...')", raw)
		}
		u.Scheme = base
		o, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("-redis %q: %w", raw, err)
		}
		return redis.NewFailoverClient(o), nil
	case kind == "cluster" || q.Has("addr"):
		u.Scheme = base
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, fmt.Errorf("-redis %q: %w", raw, err)
		}
		return redis.NewClusterClient(o), nil
	case kind != "":
		return nil, fmt.Errorf("-redis %q: unknown scheme %q; use redis, rediss, redis+cluster or redis+sentinel", raw, u.Scheme)
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("-redis %q: %w", raw, err)
	}
	c := redis.NewClient(o)
	// A node of a Cluster answers only for its own slots: ask, and read
	// through a cluster client when it is one. When the node does not
	// answer, the command that follows says so.
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil || !strings.Contains(info, "cluster_enabled:1") {
		return c, nil
	}
	_ = c.Close()
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{o.Addr}, Username: o.Username, Password: o.Password,
		TLSConfig: o.TLSConfig, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout}), nil
}
