package loop

// The wakeup protocol (Netty 4.1's nextWakeupNanos, on an eventfd;
// docs/loop.md, "Wakeup protocol"). nextWakeup holds awake while the loop
// runs and the clock instant its wait ends while it waits. Exactly one party
// moves a published deadline back to awake (the loop's CAS or a producer's
// Swap), so there is at most one eventfd write per wait and none from the
// loop itself; the eventfd is sticky, so a write landing before the wait
// ends it at once.
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
