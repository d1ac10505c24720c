package transport

import (
	"context"
	"errors"
	"fmt"
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
