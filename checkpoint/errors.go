package checkpoint

import "errors"

var (
	// ErrStale is returned by Open when the current epoch has other
	// replicas and was created by a newer lease: the caller's lease is over.
	ErrStale = errors.New("checkpoint: a newer mapping owns the ledger")

	// ErrMoved is returned by Write when its epoch is no longer current.
	ErrMoved = errors.New("checkpoint: the epoch has moved on")

	// ErrFenced is returned by Write when a newer holder of the index has
	// opened or written the epoch.
	ErrFenced = errors.New("checkpoint: a newer holder has this index")

	// ErrCorrupt is wrapped by the error of a ledger that cannot be parsed.
	ErrCorrupt = errors.New("checkpoint: ledger unreadable")
)
