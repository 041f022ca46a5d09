package conn

import (
	"errors"
	"sync"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// cancelOp cancels op id on l and reports whether the op is live, its
// final completion still to come. loop.ErrUnknownOp means the op has
// reached its final completion; any other error (the backend could not
// queue the cancel: its submission queue full, the kernel busy) leaves the
// op live, so the cancel is tried again after the turn. A terminating
// loop's drain cancels what is left. Must be called on l.
func cancelOp(l *loop.Loop, id loop.OpID) bool {
	err := l.IO().Cancel(id)
	if err != nil && !errors.Is(err, loop.ErrUnknownOp) {
		_ = l.ExecuteAfterTurn(func() { cancelOp(l, id) })
		return true
	}
	return err == nil
}

// executeRetrying runs f on l as a task that must not be lost to a bounded
// task queue that is full (loop.WithMaxPendingTasks): a close, a pause or
// resume, a dial's cancellation. Refused ones wait in l's overflow, and a
// goroutine hands them to l in order, backing off up to 10 ms, until l
// takes each or shuts down; while any waits, later calls queue behind it,
// so one goroutine's calls keep their order. The error is the loop's other
// than a full queue: l is shutting down.
func executeRetrying(l *loop.Loop, f func()) error {
	o := &registryFor(l).overflow
	o.mu.Lock()
	if len(o.q) == 0 {
		o.mu.Unlock()
		err := l.Execute(f)
		if err == nil || !errors.Is(err, loop.ErrQueueFull) {
			return err
		}
		o.mu.Lock()
	}
	o.q = append(o.q, f)
	if !o.running {
		o.running = true
		go o.drain(l)
	}
	o.mu.Unlock()
	return nil
}

// overflow holds tasks a loop's full task queue refused, for drain.
type overflow struct {
	mu      sync.Mutex
	q       []func()
	running bool
}

// drain hands the overflow's tasks to l in order until none is left. One
// l refuses for shutting down is dropped: the loop's shutdown closes what
// it would have.
func (o *overflow) drain(l *loop.Loop) {
	wait := 100 * time.Microsecond
	for {
		o.mu.Lock()
		if len(o.q) == 0 {
			o.q, o.running = nil, false
			o.mu.Unlock()
			return
		}
		f := o.q[0]
		o.mu.Unlock()
		if err := l.Execute(f); err != nil && errors.Is(err, loop.ErrQueueFull) {
			time.Sleep(wait)
			wait = min(2*wait, 10*time.Millisecond)
			continue
		}
		wait = 100 * time.Microsecond
		o.mu.Lock()
		o.q[0] = nil
		o.q = o.q[1:]
		o.mu.Unlock()
	}
}
