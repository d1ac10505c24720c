package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// urlForms is what -redis accepts, for the flags' help.
const urlForms = `redis://[user:pass@]host:port[/db] (a server, or any node of a Redis Cluster: found out with INFO cluster); ` +
	`redis+cluster://host:port[?addr=host2:port2...] (a Cluster); ` +
	`redis://sentinel:port?master_name=NAME[&addr=sentinel2:port...] or redis+sentinel://... (Sentinel); rediss for TLS`

// reachTimeout bounds connect's check that Redis answers.
var reachTimeout = 5 * time.Second

// A usageError is a -redis value that is not a URL nandi can use: the
// command line is wrong (exit 2), not the server.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func badURL(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// connect returns a client for a -redis URL: a single server, a Redis
// Cluster or a master behind Sentinels, in go-redis's URL forms
// (ParseURL, ParseClusterURL, ParseFailoverURL), once it has answered a
// PING within reachTimeout. A plain redis:// URL that names a node of a
// Cluster gets a cluster client, so that the group's keys are read
// wherever their slot lives. A URL that is wrong is a *usageError; a
// server that does not answer is one line: "cannot reach Redis at ...".
func connect(ctx context.Context, raw string) (redis.UniversalClient, error) {
	c, addr, err := client(raw)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if pctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", reachTimeout)
		}
		return nil, fmt.Errorf("cannot reach Redis at %s: %v", addr, err)
	}
	sc, ok := c.(*redis.Client)
	if !ok {
		return c, nil
	}
	// A node of a Cluster answers only for its own slots: ask, and read
	// through a cluster client when it is one.
	info, err := sc.Info(pctx, "cluster").Result()
	if err != nil || !strings.Contains(info, "cluster_enabled:1") {
		return c, nil
	}
	o := sc.Options()
	_ = c.Close()
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{o.Addr}, Username: o.Username, Password: o.Password,
		TLSConfig: o.TLSConfig, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		DialerRetries: o.DialerRetries}), nil
}

// client makes the client of a -redis URL, without any I/O, and says
// which address it reaches. A CLI tries once, briefly: one dial retry,
// not go-redis's five.
func client(raw string) (redis.UniversalClient, string, error) {
	if raw == "" {
		return nil, "", badURL("-redis is required (or set $%s), for example -redis redis://localhost:6379/0", envRedisURL)
	}
	if !strings.Contains(raw, "://") {
		return nil, "", badURL("-redis %q is not a URL: did you mean redis://%s?", raw, raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", badURL("-redis %q: %v", raw, err)
	}
	base, kind, _ := strings.Cut(u.Scheme, "+")
	q := u.Query()
	switch {
	case base != "redis" && base != "rediss":
		return nil, "", badURL("-redis %q: unknown scheme %q; use redis, rediss, redis+cluster or redis+sentinel", raw, u.Scheme)
	case kind == "sentinel" || q.Has("master_name"):
		if q.Get("master_name") == "" {
			return nil, "", badURL("-redis %q: a Sentinel URL names the master: add ?master_name=NAME (the name in 'sentinel monitor NAME ...')", raw)
		}
		u.Scheme = base
		o, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, "", badURL("-redis %q: %v", raw, err)
		}
		o.DialerRetries = cliDialRetries(o.DialerRetries)
		return redis.NewFailoverClient(o), "the Sentinels " + strings.Join(o.SentinelAddrs, ","), nil
	case kind == "cluster" || q.Has("addr"):
		u.Scheme = base
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, "", badURL("-redis %q: %v", raw, err)
		}
		o.DialerRetries = cliDialRetries(o.DialerRetries)
		return redis.NewClusterClient(o), strings.Join(o.Addrs, ","), nil
	case kind != "":
		return nil, "", badURL("-redis %q: unknown scheme %q; use redis, rediss, redis+cluster or redis+sentinel", raw, u.Scheme)
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, "", badURL("-redis %q: %v", raw, err)
	}
	o.DialerRetries = cliDialRetries(o.DialerRetries)
	return redis.NewClient(o), o.Addr, nil
}

// cliDialRetries is 1 unless the URL asked for more (dialer_retries=N).
func cliDialRetries(n int) int { return max(n, 1) }

// connected is connect for a command: on failure it has said why on
// stderr and returns the exit code (2 for a bad URL, 1 for a server that
// does not answer).
func (f *flags) connected(ctx context.Context, raw string) (redis.UniversalClient, int) {
	c, err := connect(ctx, raw)
	if err == nil {
		return c, exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return nil, f.usageError("%s", ue.msg)
	}
	return nil, f.failed(err)
}
