package loop

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// The stalled-ring detector (Netty's premature-select counter;
// docs/loop.md, "Stall recovery"): consecutive empty early returns of the
// wait, up to WithStallThreshold, make the loop rebuild its backend.
// RebuildRing runs the same recovery on demand.

// observeWait feeds one poll's outcome to the detector.
func (l *Loop) observeWait(timeout time.Duration, res pollResult, err error, now int64) {
	switch {
	case res.interrupted || errors.Is(err, unix.EINTR):
		l.stats.interrupts.Add(1)
		return
	case err != nil:
		if l.stats.pollErrors.Add(1) == 1 || l.stallCount == 0 {
			l.logger.Warn("loop: wait failed", "loop", l.name, "err", err)
		}
		time.Sleep(time.Millisecond)
	case timeout == 0 || res.timedOut || res.completions > 0 || res.woken:
		l.stallCount = 0
		return
	case l.hasWork() || l.timerDue(now):
		l.stallCount = 0
		return
	}
	l.stallCount++
	l.stats.earlyReturns.Add(1)
	if th := l.cfg.stallThreshold; th > 0 && l.stallCount >= th {
		l.logger.Warn("loop: wait returned prematurely; rebuilding the backend",
			"loop", l.name, "backend", l.drv.backend().String(), "times", l.stallCount)
		l.stallCount = 0
		l.rebuild("stall")
	}
}

// timerDue reports whether the wheel has a timer due at now.
func (l *Loop) timerDue(now int64) bool {
	next, ok := l.wheel.NextDeadline()
	return ok && next <= now
}

// rebuild replaces the backend's ring (or epoll instance), migrating every
// live op. On failure the old one is kept and the failure counted. Must be
// called on the loop goroutine, outside a poll.
func (l *Loop) rebuild(reason string) {
	if State(l.state.Load()) >= StateShutdown {
		return
	}
	n, err := l.drv.rebuild(l.ops, l)
	if err != nil {
		l.stats.rebuildFailures.Add(1)
		l.logger.Warn("loop: rebuild failed; keeping the old backend", "loop", l.name, "reason", reason, "err", err)
		return
	}
	// Migrated first: whoever sees the rebuild counted sees its ops too
	// (Stats loads rebuilds before migrated).
	l.stats.migrated.Add(uint64(n))
	l.stats.rebuilds.Add(1)
	l.logger.Info("loop: backend rebuilt", "loop", l.name, "reason", reason, "migrated", n)
}
