package loop

import (
	"fmt"

	"github.com/ringloop/ringloop/sched"
)

// NewFuture returns a pending future that code running on l completes
// (Netty's EventLoop.newPromise). Waiting for it on l's goroutine while it
// is pending would block l for good, since l is what must complete it: its
// Wait, called there, returns the zero value and an error wrapping
// ErrInLoop at once, whatever the context. A complete future's Wait returns
// its result on any goroutine, so an OnDone listener on l may call it.
// Waiting on another loop's goroutine is not refused: it stalls that loop
// meanwhile, and two loops waiting for each other's futures stop for good
// (docs/loop.md, "Blocking waits"); an OnDone listener is the way to act on
// the result from a loop. The futures of l's timers (Timer.Future) are made
// the same way. Safe for concurrent use.
func NewFuture[T any](l *Loop) *sched.Future[T] {
	return sched.NewFutureOn[T]((*futureOwner)(l))
}

// futureOwner is a Loop as the owner (sched.Owner) of the futures it
// completes: NewFuture's and its timers'.
type futureOwner Loop

// CheckWait refuses a wait on the loop's own goroutine with an error
// wrapping ErrInLoop.
func (o *futureOwner) CheckWait() error {
	l := (*Loop)(o)
	if !l.InLoop() {
		return nil
	}
	return fmt.Errorf("loop: Wait for a future on %s, the loop that completes it: %w", l.name, ErrInLoop)
}
