package loop

// The wakeup protocol (Netty 4.1's nextWakeupNanos, on an eventfd).
//
// nextWakeup holds awake while the loop runs, and the clock instant its wait
// will end while it waits:
//
//	loop goroutine                          other goroutines (Execute …)
//	──────────────                          ───────────────────────────
//	nextWakeup = deadline   (publish)        push task
//	re-check task queues ──┐                 if nextWakeup != awake &&
//	  empty: wait          │                    Swap(awake) != awake:
//	  else: CAS(deadline → awake)                write eventfd (driver.wake)
//	        ok → do not block
//	        lost → a producer is writing the eventfd: wait (returns at once)
//	first completion delivered, or wait
//	returns: nextWakeup = awake
//
// Exactly one goroutine moves nextWakeup from a published deadline back to
// awake: the loop (it found work before blocking, or its wait ended with
// completions to deliver) or the one producer that writes the eventfd. So there is at most one eventfd write per published
// deadline, every such write ends a wait that was counted in Stats.Sleeps,
// and Stats.WakeWrites <= Stats.Sleeps. The loop itself never writes the
// eventfd: while it runs, nextWakeup is awake.
//
// A task pushed just after the re-check cannot be missed: its producer then
// sees the published deadline and writes the eventfd. The eventfd counter is
// sticky and its read (io_uring) or EPOLLIN registration (epoll) stays
// armed, so a write that lands before the wait begins ends it at once:
// Netty's "wakeup before select" race cannot lose a wakeup, and no wakeup
// after the wait is needed. A write that finds the counter saturated
// (EAGAIN) means a wakeup is already pending, which is all it wanted.
//
// A timer scheduled from outside wakes the loop only if it is due before the
// published deadline (a timer 10 s out never writes the eventfd: the loop's
// wait is at most 1 s and it inserts the timer on its next turn).
const awake int64 = -1

// wakeup ends the loop's current wait, if it waits, with at most one eventfd
// write per wait. Safe for concurrent use; a no-op on the loop goroutine.
func (l *Loop) wakeup() {
	if l.nextWakeup.Load() == awake {
		return
	}
	if l.nextWakeup.Swap(awake) != awake {
		l.writeWake()
	}
}

// wakeupBefore ends the loop's wait only if it would last beyond when (a
// clock instant). Safe for concurrent use.
func (l *Loop) wakeupBefore(when int64) {
	for {
		nw := l.nextWakeup.Load()
		if nw == awake || when >= nw {
			return
		}
		if l.nextWakeup.CompareAndSwap(nw, awake) {
			l.writeWake()
			return
		}
	}
}

func (l *Loop) writeWake() {
	l.stats.wakeWrites.Add(1)
	if err := l.drv.wake(); err != nil {
		l.logger.Warn("loop: wakeup failed", "loop", l.name, "err", err)
	}
}

// publishWait is the loop's side: it publishes the wait deadline and decides
// whether the loop may block. It returns false, with nextWakeup back at
// awake, when work arrived before the wait; true when the loop must wait (a
// producer may already be ending that wait).
func (l *Loop) publishWait(deadline int64) bool {
	l.nextWakeup.Store(deadline)
	if !l.hasWork() {
		return true
	}
	return !l.nextWakeup.CompareAndSwap(deadline, awake)
}

// hasWork reports whether tasks or tail tasks are queued.
func (l *Loop) hasWork() bool {
	return l.tasks.Len() > 0 || l.tail.Len() > 0 || l.parked.len() > 0
}
