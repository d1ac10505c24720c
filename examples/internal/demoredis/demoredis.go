// Package demoredis gives an example its Redis: the one at a URL, or an
// embedded one (miniredis) when none is given, so that every example runs
// with go run and no flags.
package demoredis

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Options returns the client options of the Redis at url, or of an
// embedded Redis started for the example when url is "". stop stops the
// embedded one (and does nothing for a URL's).
func Options(url string) (opts *redis.Options, stop func(), err error) {
	if url == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return nil, nil, fmt.Errorf("starting an embedded Redis: %w", err)
		}
		return &redis.Options{Addr: mr.Addr()}, mr.Close, nil
	}
	opts, err = redis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("-redis %q: %w", url, err)
	}
	return opts, func() {}, nil
}
