package loop

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error string of this package starts with "loop: ".
var (
	// ErrRejected is returned when a task, timer or hook cannot be accepted:
	// the loop is shut down (or terminated), or its bounded task queue is
	// full. The returned error wraps ErrRejected and the reason, so both
	// errors.Is(err, ErrRejected) and errors.Is(err, ErrShutdown) (or
	// errors.Is(err, ErrQueueFull)) hold.
	ErrRejected = errors.New("loop: task rejected")

	// ErrShutdown is the reason of an ErrRejected returned after the loop
	// left the shutting-down state.
	ErrShutdown = errors.New("loop: shut down")

	// ErrShuttingDown is the reason of an ErrRejected for timers scheduled
	// once a graceful shutdown began: pending timers are canceled then, so a
	// new one could never run.
	ErrShuttingDown = errors.New("loop: shutting down")

	// ErrQueueFull is the reason of an ErrRejected when the task queue holds
	// WithMaxPendingTasks tasks.
	ErrQueueFull = errors.New("loop: task queue full")

	// ErrClosed is returned by the op API once the loop is shut down: no new
	// op is accepted while in-flight ops are canceled and reaped.
	ErrClosed = errors.New("loop: closed")

	// ErrNilTask is returned for a nil task, hook or timer function.
	ErrNilTask = errors.New("loop: nil task")

	// ErrNilCompleter is returned by the op API for a nil Completer.
	ErrNilCompleter = errors.New("loop: nil completer")

	// ErrInvalidOption is wrapped by every option validation error of
	// NewGroup.
	ErrInvalidOption = errors.New("loop: invalid option")

	// ErrInvalidArgument is wrapped by op API errors for bad arguments
	// (negative fd, empty buffer list, unsupported address family …).
	ErrInvalidArgument = errors.New("loop: invalid argument")

	// ErrTooManyOps is returned by the op API when the op table is full.
	ErrTooManyOps = errors.New("loop: too many ops in flight")

	// ErrUnknownOp is returned by Cancel for an OpID that names no live op:
	// it already completed, or never existed.
	ErrUnknownOp = errors.New("loop: unknown op")

	// ErrGivenUp is the cause reported for an op given up without the
	// kernel's final word (Completion.Quarantined with Res -ECANCELED):
	// a ring rebuild could not learn its outcome by its deadline.
	ErrGivenUp = errors.New("loop: op given up at a ring rebuild: outcome unknown")

	// ErrInLoop is returned by a blocking call made on a loop goroutine
	// that would have to wait for that loop (or, for Shutdown, for its
	// group): waiting there would deadlock. Future.Wait on a pending
	// future of its own loop, Shutdown, Dial, the net adapters' blocking
	// calls and others return it at once (docs/conn.md, "Loop affinity").
	// Shutdown starts the shutdown anyway; wait for Done elsewhere.
	ErrInLoop = errors.New("loop: blocking call on a loop goroutine")
)

// rejected returns an ErrRejected wrapping why.
func rejected(why error) error {
	return &rejectedError{why: why}
}

// rejectedError is ErrRejected with its reason.
type rejectedError struct{ why error }

func (e *rejectedError) Error() string { return ErrRejected.Error() + ": " + e.why.Error() }

func (e *rejectedError) Unwrap() []error { return []error{ErrRejected, e.why} }

// Preallocated rejections, so a full queue or a shut-down loop never makes
// Execute allocate.
var (
	errRejectedShutdown     = rejected(ErrShutdown)
	errRejectedShuttingDown = rejected(ErrShuttingDown)
	errRejectedFull         = rejected(ErrQueueFull)
)

// invalidOption returns an ErrInvalidOption naming the option and the value.
func invalidOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
}

// invalidArgument returns an ErrInvalidArgument with a description.
func invalidArgument(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
