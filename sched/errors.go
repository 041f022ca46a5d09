package sched

import "errors"

// Errors returned by the package. Each carries the "sched:" prefix so that a
// caller wrapping them keeps the origin visible.
var (
	// ErrQueueFull is returned by [Queue.Push] when the queue holds as many
	// unconsumed tasks as its limit allows. Tasks accepted earlier stay queued.
	ErrQueueFull = errors.New("sched: task queue full")

	// ErrNilTask is returned when a nil task or timer function is submitted.
	ErrNilTask = errors.New("sched: nil task")

	// ErrCanceled completes the future of a timer that was stopped before it
	// ran, or whose periodic schedule was stopped.
	ErrCanceled = errors.New("sched: timer canceled")

	// ErrBadPeriod is returned for a periodic timer whose period is not positive.
	ErrBadPeriod = errors.New("sched: period must be positive")

	// ErrBadTick is returned by [NewWheel] for a negative tick.
	ErrBadTick = errors.New("sched: tick must be positive")

	// ErrTimerScheduled is returned by [Wheel.Add] for a timer that is already
	// in the wheel, has already run, was stopped, or belongs to another wheel.
	// Use [Timer.Reset] to arm such a timer again.
	ErrTimerScheduled = errors.New("sched: timer already scheduled, finished or foreign")
)
