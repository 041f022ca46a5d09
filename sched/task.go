package sched

import (
	"fmt"
	"runtime/debug"
)

// A Task is a unit of work run by the consumer of a [Queue].
//
// Task is an interface rather than a bare func() so that a [*Timer] can travel
// through the same queue as ordinary tasks without a wrapper allocation: the
// loop pushes due timers, and timers created on other goroutines, as they are.
// Plain functions become tasks through [TaskFunc]; a func value is
// pointer-shaped, so that conversion does not allocate either.
type Task interface {
	Run()
}

// TaskFunc adapts an ordinary function to a [Task].
type TaskFunc func()

// Run calls f.
func (f TaskFunc) Run() { f() }

// isNil reports whether t is nil or a nil TaskFunc.
func isNil(t Task) bool {
	if t == nil {
		return true
	}
	f, ok := t.(TaskFunc)
	return ok && f == nil
}

// A PanicError reports a panic raised by a task. [Run] returns it, and the
// future of a timer whose task panicked fails with it.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the panicking goroutine's stack, captured when the panic was
	// recovered.
	Stack []byte
}

// Error describes the panic value.
func (e *PanicError) Error() string {
	return fmt.Sprintf("sched: task panicked: %v", e.Value)
}

// Unwrap returns the panic value if it is an error, so errors.Is and
// errors.As see through a task that panicked with an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// asPanicError wraps a recovered value, keeping a *PanicError as it is so a
// panic re-raised by [Timer.Run] is reported once, with its original stack.
func asPanicError(r any) *PanicError {
	if pe, ok := r.(*PanicError); ok {
		return pe
	}
	return &PanicError{Value: r, Stack: debug.Stack()}
}

// Run runs t and recovers a panic, returning it as a [*PanicError]; it returns
// nil when t returns normally. This is the panic policy of the event loop: a
// panicking task is reported and the loop carries on with the next one.
// Safe for concurrent use.
func Run(t Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = asPanicError(r)
		}
	}()
	t.Run()
	return nil
}
