package consumer

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidOptions is wrapped by every error New returns for bad options.
	ErrInvalidOptions = errors.New("consumer: invalid options")

	// ErrAlreadyRunning is returned by a second call of Run.
	ErrAlreadyRunning = errors.New("consumer: Run called twice")

	// ErrPermanent marks a failure that no retry can mend: errors.Is(err,
	// ErrPermanent) holds for an error made with Permanent (however it is
	// wrapped afterwards), for a message the source could not make a task
	// of (transport.Message.Err) and for an Options.ID error. Such a task
	// is not retried: it goes to DeadLetter at once when one is set,
	// whatever MaxAttempts, and is otherwise skipped, logged and counted
	// (Stats.Skipped).
	ErrPermanent = errors.New("consumer: permanent failure")

	// ErrPanicked is matched (errors.Is) by every *PanicError.
	ErrPanicked = errors.New("consumer: panicked")
)

// Permanent marks err as a failure that retrying cannot mend (a message
// that does not parse, a customer that no longer exists): the consumer
// sends the task to DeadLetter at once, or skips it when there is none,
// instead of retrying it. The result matches both errors.Is(_,
// ErrPermanent) and whatever err matches, also after further wrapping
// with fmt.Errorf("...: %w", ...). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

// IsPermanent reports whether err is marked permanent (see ErrPermanent).
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// PanicError is the failure of a call into user code that panicked: the
// handler, DeadLetter, OnError or Options.ID. The consumer recovers the
// panic in the goroutine that made the call, logs Stack at Error, and
// treats the call as failed: a handler's panic is a failed attempt that
// goes through the failure policy like any error. The process never dies
// of it.
type PanicError struct {
	// Func names what panicked: "handler", "DeadLetter", "OnError" or "ID".
	Func string
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack (runtime/debug.Stack).
	Stack []byte
}

// Error says what panicked and with what value.
func (e *PanicError) Error() string {
	return fmt.Sprintf("consumer: %s panicked: %v", e.Func, e.Value)
}

// Is makes errors.Is(err, ErrPanicked) true.
func (e *PanicError) Is(target error) bool { return target == ErrPanicked }

// Unwrap returns the panic value when it is an error (panic(err)), so
// errors.Is and errors.As see through to it.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
