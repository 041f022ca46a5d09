package loop

import "sync/atomic"

// The wakeup protocol (Netty 4.1's nextWakeupNanos, on an eventfd;
// docs/loop.md, "Wakeup protocol"). nextWakeup holds awake while the loop
// runs and the clock instant its wait ends while it waits. Exactly one party
// moves a published deadline back to awake (the loop's CAS or a producer's
// Swap), so there is at most one eventfd write per wait and none from the
// loop itself; the eventfd is sticky, so a write landing before the wait
// ends it at once.
const awake int64 = -1

// waker is a loop's side of the wakeup protocol: the deadline it publishes
// before it waits, and the eventfd writes of producers that end the wait.
type waker struct {
	l          *Loop
	nextWakeup atomic.Int64 // awake, or the clock instant the loop's wait ends
}

// wake ends the loop's current wait, if it waits, with at most one eventfd
// write per wait. Safe for concurrent use; a no-op on the loop goroutine.
func (w *waker) wake() {
	if w.nextWakeup.Load() == awake {
		return
	}
	if w.nextWakeup.Swap(awake) != awake {
		w.write()
	}
}

// wakeBefore ends the loop's wait only if it would last beyond when (a
// clock instant). Safe for concurrent use.
func (w *waker) wakeBefore(when int64) {
	for {
		deadline := w.nextWakeup.Load()
		if deadline == awake || when >= deadline {
			return
		}
		if w.nextWakeup.CompareAndSwap(deadline, awake) {
			w.write()
			return
		}
	}
}

// write signals the backend's eventfd.
func (w *waker) write() {
	l := w.l
	l.stats.wakeWrites.Add(1)
	if err := l.drv.wake(); err != nil {
		l.logger.Warn("loop: wakeup failed", "loop", l.name, "err", err)
	}
}

// publish is the loop's side: it publishes the wait deadline and decides
// whether the loop may block. It returns false, with nextWakeup back at
// awake, when work arrived before the wait or the loop's state moved on
// from seen (the state the wait's length was computed from: a shutdown
// begun in between shortens it, and its wake found no deadline to end);
// true when the loop must wait (a producer may already be ending that
// wait).
func (w *waker) publish(deadline int64, seen State) bool {
	if beforeWait != nil {
		beforeWait()
	}
	w.nextWakeup.Store(deadline)
	if !w.l.hasWork() && State(w.l.state.Load()) == seen {
		return true
	}
	return !w.nextWakeup.CompareAndSwap(deadline, awake)
}

// beforeWait, when a test sets it, runs on the loop goroutine after the
// loop chose to wait and before it publishes the deadline.
var beforeWait func()

// hasWork reports whether tasks, tail tasks or parked receives wait.
func (l *Loop) hasWork() bool {
	return l.tasks.Len() > 0 || l.tail.Len() > 0 || l.io.parked.len() > 0
}
