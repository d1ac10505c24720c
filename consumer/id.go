package consumer

import "github.com/nandi-go/nandi/transport"

// ID is the task id of a message key, the same on every worker: a key that
// is a decimal uint64 ("42", also "0042") is that number; any other key is
// its 64-bit FNV-1a hash (hash/fnv's New64a over the key's bytes), which is
// simple to compute the same way in any language. It is transport.TaskID,
// which producers and transports share.
func ID(key string) uint64 { return transport.TaskID(key) }
