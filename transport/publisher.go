package transport

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Publisher writes tasks where a group's source reads them: each key to
// the shard the source expects it in (aligned by task id where the source
// is aligned), in the fields, headers or subject the source reads its key
// and payload from. Each transport with a producer side has one
// (redisstream.Producer). Publish refuses, before writing, a key the
// consumer would not accept (an empty one) and headers that would be read
// as the key or the payload.
type Publisher interface {
	Publish(ctx context.Context, key string, payload []byte, headers map[string]string) error
}

// ErrInvalidTask is wrapped by a Publisher's refusal of a task it must
// not write (nothing of the call is written).
var ErrInvalidTask = errors.New("transport: invalid task")

// InvalidTask returns an error wrapping ErrInvalidTask.
func InvalidTask(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidTask}, args...)...)
}

// Inject is the hook a Publisher calls to write the context's trace
// context into a task's headers (tracing.Inject fits it).
type Inject func(ctx context.Context, headers map[string]string)

// TaskHeaders returns the headers to publish task i with: a copy of
// headers, plus the key under keyHeader when the transport carries the
// key in a header (keyHeader "" otherwise), plus what inject adds (nil:
// nothing). It refuses an empty key, and a header named keyHeader
// (reserved) or named in reserved (fields the source reads as something
// else), with ErrInvalidTask. It returns headers itself when there is
// nothing to add.
func TaskHeaders(ctx context.Context, i int, key, keyHeader string, headers map[string]string, inject Inject, reserved ...string) (map[string]string, error) {
	if key == "" {
		return nil, InvalidTask("task %d has an empty key: every task needs the key its id comes from", i)
	}
	for k := range headers {
		if k == keyHeader || slices.Contains(reserved, k) {
			return nil, InvalidTask("task %d has a header %q, which the source reads as its key or payload", i, k)
		}
	}
	if keyHeader == "" && inject == nil {
		return headers, nil
	}
	h := make(map[string]string, len(headers)+3)
	maps.Copy(h, headers)
	if inject != nil {
		inject(ctx, h)
	}
	if keyHeader != "" {
		h[keyHeader] = key
	}
	return h, nil
}
