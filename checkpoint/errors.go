package checkpoint

import (
	"errors"
	"fmt"
)

var (
	// ErrStale is returned by Open when the current epoch has other
	// replicas and was created by a newer lease: the caller's lease is over.
	ErrStale = errors.New("checkpoint: a newer mapping owns the ledger")

	// ErrMoved is returned by Write when its epoch is no longer current.
	ErrMoved = errors.New("checkpoint: the epoch has moved on")

	// ErrLate is returned by Write when its marks were recorded into its
	// epoch, but a newer epoch of the same replicas has begun (the log
	// grew, or was found misaligned): the holder drains and opens again.
	// It wraps ErrMoved.
	ErrLate = fmt.Errorf("%w (the marks were recorded; open again)", ErrMoved)

	// ErrShrunk is returned by Open when an aligned source has fewer
	// shards than the ledger's log is aligned to.
	ErrShrunk = errors.New("checkpoint: the aligned log has fewer shards than its checkpoints")

	// ErrFenced is returned by Write when a newer holder of the index has
	// opened or written the epoch.
	ErrFenced = errors.New("checkpoint: a newer holder has this index")

	// ErrHeld is returned by Open for a provisional term
	// (OpenRequest.Provisional) while an index of the current epoch has not
	// been released, or the epoch does not know who serves it: nothing was
	// written; open again later, or once the term is confirmed.
	ErrHeld = errors.New("checkpoint: the current epoch is still held")

	// ErrWait is returned by Realign when an index of the current epoch
	// has not opened it yet, or the history would hold more than
	// MaxHistory epochs: nothing was written, and the caller tries again
	// (it stays before the task it found, which is not passed).
	ErrWait = errors.New("checkpoint: the realign must wait")

	// ErrTooLarge is returned by Open when the epoch it would serve has
	// more marks than MaxSlots (replicas x shards): nothing is written.
	ErrTooLarge = errors.New("checkpoint: replicas x shards over MaxSlots")

	// ErrCorrupt is wrapped by the error of a ledger that cannot be parsed.
	ErrCorrupt = errors.New("checkpoint: ledger unreadable")
)
