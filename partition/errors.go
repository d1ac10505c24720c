package partition

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrInvalidOptions is wrapped by the error New returns for options it
	// cannot run with; the message names the field and what to do.
	ErrInvalidOptions = errors.New("partition: invalid options")

	// ErrSettingsMismatch is wrapped by the error Run returns when the group
	// already runs with another Interval or Gap. Two settings in one group
	// would count two different sets of intervals, so the worker is refused
	// and never holds anything. See *SettingsError for the details.
	ErrSettingsMismatch = errors.New("partition: group runs with other settings")

	// ErrAlreadyRunning is returned by a second call of Run on one Lease.
	ErrAlreadyRunning = errors.New("partition: Run called twice")

	// ErrStopped ends a term because Run returned, and is returned by Next
	// once Run has returned.
	ErrStopped = errors.New("partition: lease stopped")

	// ErrMappingChanged ends a term because the last two closed intervals no
	// longer agree on this worker's (index, replicas): membership changed, or
	// this worker missed a registration. The term is not cut short: from
	// the registration that disagrees it is no longer renewed and is kept
	// to its cap, half a gap before the new mapping's holders may start,
	// and ends there.
	ErrMappingChanged = errors.New("partition: mapping changed")

	// ErrExpired ends a term because its deadline passed before a
	// registration renewed it: the store was slow, unreachable or hung, or
	// this process was paused.
	ErrExpired = errors.New("partition: lease expired")

	// ErrGenerationChanged ends a term because the store may have lost
	// acknowledged writes (a restart, a failover, a flush): all history is
	// dropped and agreement starts again.
	ErrGenerationChanged = errors.New("partition: store generation changed")
)

// SettingsError tells which settings the group runs with and which this
// worker has. It wraps ErrSettingsMismatch.
type SettingsError struct {
	Group          string        // the group's name
	GroupInterval  time.Duration // the group's Interval
	GroupGap       float64       // and its Gap
	WorkerInterval time.Duration // this worker's Interval
	WorkerGap      float64       // and its Gap
}

// Error says both settings and how to make them agree.
func (e *SettingsError) Error() string {
	return fmt.Sprintf("partition: group %q runs with interval %v and gap %g, this worker has interval %v and gap %g: "+
		"use the group's settings, or another group name (a group's settings can change once all its workers have been stopped for 10 intervals)",
		e.Group, e.GroupInterval, e.GroupGap, e.WorkerInterval, e.WorkerGap)
}

// Unwrap makes errors.Is(err, ErrSettingsMismatch) true.
func (e *SettingsError) Unwrap() error { return ErrSettingsMismatch }
