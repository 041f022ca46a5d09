package loop

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// The stalled-ring detector (Netty's premature-select counter;
// docs/loop.md, "Stall recovery"): consecutive empty early returns of the
// wait, up to WithStallThreshold, make the loop rebuild its backend.
// rebuildRing runs the same recovery on demand (tests).

// stallDetector counts a loop's consecutive empty early returns. Loop
// goroutine only.
type stallDetector struct {
	l            *Loop
	emptyReturns int // consecutive empty early returns
}

// observe feeds one poll's outcome to the detector.
func (s *stallDetector) observe(timeout time.Duration, res pollResult, err error, now int64) {
	l := s.l
	switch {
	case res.interrupted || errors.Is(err, unix.EINTR):
		l.stats.interrupts.Add(1)
		return
	case err != nil:
		if l.stats.pollErrors.Add(1) == 1 || s.emptyReturns == 0 {
			l.logger.Warn("loop: wait failed", "loop", l.name, "err", err)
		}
		time.Sleep(time.Millisecond)
	case timeout == 0 || res.timedOut || res.completions > 0 || res.woken:
		s.emptyReturns = 0
		return
	case l.hasWork() || s.timerDue(now):
		s.emptyReturns = 0
		return
	}
	s.emptyReturns++
	l.stats.earlyReturns.Add(1)
	if th := l.cfg.stallThreshold; th > 0 && s.emptyReturns >= th {
		l.logger.Warn("loop: wait returned prematurely; rebuilding the backend",
			"loop", l.name, "backend", l.drv.backend().String(), "times", s.emptyReturns)
		s.emptyReturns = 0
		l.io.rebuild("stall")
	}
}

// timerDue reports whether the wheel has a timer due at now.
func (s *stallDetector) timerDue(now int64) bool {
	next, ok := s.l.wheel.NextDeadline()
	return ok && next <= now
}

// rebuild replaces the backend's ring (or epoll instance), migrating every
// live op. On failure the old one is kept and the failure counted. Must be
// called on the loop goroutine, outside a poll.
func (io *IO) rebuild(reason string) {
	l := io.l
	if State(l.state.Load()) >= StateShutdown {
		return
	}
	n, err := io.drv.rebuild(io.ops, io)
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
