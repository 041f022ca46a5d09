package loop

import (
	"errors"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Graceful shutdown (Netty's shutdownGracefully / confirmShutdown;
// docs/loop.md, "Graceful shutdown").

// Defaults of Group.ShutdownGracefully callers (Netty's values).
const (
	DefaultQuietPeriod     = 2 * time.Second
	DefaultShutdownTimeout = 15 * time.Second
)

func checkShutdownArgs(quiet, timeout time.Duration) error {
	if quiet < 0 {
		return invalidOption("quiet period %v (expected >= 0)", quiet)
	}
	if timeout < quiet {
		return invalidOption("shutdown timeout %v (expected >= quiet period %v)", timeout, quiet)
	}
	return nil
}

func (l *Loop) shutdownGracefully(quiet, timeout time.Duration) {
	l.submitters.Add(1)
	for {
		switch State(l.state.Load()) {
		case StateNotStarted:
			if l.state.CompareAndSwap(int32(StateNotStarted), int32(StateShutdown)) {
				l.submitters.Add(-1)
				l.terminateUnstarted()
				return
			}
		case StateStarted:
			l.quiet.Store(int64(quiet))
			l.timeout.Store(int64(timeout))
			l.shutdownAt.Store(l.clock.Now())
			if l.state.CompareAndSwap(int32(StateStarted), int32(StateShuttingDown)) {
				l.wakeup()
				l.submitters.Add(-1)
				return
			}
		default:
			l.submitters.Add(-1)
			return
		}
	}
}

// terminateUnstarted ends a loop that never started. Its goroutine is
// started only if tasks or hooks slipped in between a producer's state check
// and the state change; otherwise the backend is closed from here.
func (l *Loop) terminateUnstarted() {
	l.waitSubmitters()
	if l.hasWork() || l.hasHooks() {
		go l.main(make(chan error, 1))
		return
	}
	if err := l.drv.close(); err != nil {
		l.logger.Warn("loop: closing the backend failed", "loop", l.name, "err", err)
	}
	l.terminated()
}

// waitSubmitters waits until no producer is between its state check and the
// end of its push and wake. Producers hold that window for a few
// instructions (or, for the first Execute, until the loop started).
func (l *Loop) waitSubmitters() {
	for l.submitters.Load() != 0 {
		runtime.Gosched()
	}
}

// forceState raises the state to at least s.
func (l *Loop) forceState(s State) {
	for {
		cur := l.state.Load()
		if State(cur) >= s || l.state.CompareAndSwap(cur, int32(s)) {
			return
		}
	}
}

// shutdownWait bounds a wait while shutting down: until the quiet period
// or the timeout could end, at most shutdownPollInterval, at least a tick.
func (l *Loop) shutdownWait(now int64) time.Duration {
	d := shutdownPollInterval
	if l.confirming {
		if q := time.Duration(l.lastExec + l.quiet.Load() - now); q < d {
			d = q
		}
		if t := time.Duration(l.shutdownAt.Load() + l.timeout.Load() - now); t < d {
			d = t
		}
	}
	return max(d, l.cfg.tick)
}

// safeConfirmShutdown runs confirmShutdown; a panic in it ends the loop.
func (l *Loop) safeConfirmShutdown() (done bool) {
	defer func() {
		if r := recover(); r != nil {
			l.stats.panics.Add(1)
			l.logger.Error("loop: unexpected panic while shutting down", "loop", l.name, "panic", r)
			done = true
		}
	}()
	return l.confirmShutdown()
}

// confirmShutdown reports whether the shutdown may complete. It runs on the
// loop after every turn once the state is ShuttingDown or later.
func (l *Loop) confirmShutdown() bool {
	now := l.clock.Now()
	if !l.confirming {
		l.confirming = true
		l.lastExec = max(l.lastExec, now) // the quiet period starts no earlier than now
	}
	l.wheel.StopAll()
	ran := l.runQueued() > 0
	if l.runHooks() {
		ran = true
	}
	if State(l.state.Load()) >= StateShutdown {
		return true
	}
	now = l.clock.Now()
	if now-l.shutdownAt.Load() >= l.timeout.Load() {
		return true
	}
	if l.held(now) {
		return false // DelayTermination: until released, its limit or the timeout
	}
	quiet := l.quiet.Load()
	if ran {
		l.lastExec = now
		return quiet == 0
	}
	return quiet == 0 || now-l.lastExec > quiet
}

// hold is a DelayTermination hold: its id and the clock instant its limit
// passes (math.MaxInt64 for a limit too long to add to the clock).
type hold struct {
	id    uint64
	until int64
}

// held reports whether a hold not yet released keeps the loop from
// terminating at now. Holds whose limit passed are dropped.
func (l *Loop) held(now int64) bool {
	k := 0
	for _, h := range l.holds {
		if now < h.until {
			l.holds[k] = h
			k++
		}
	}
	clear(l.holds[k:])
	l.holds = l.holds[:k]
	return k > 0
}

// dropHold removes hold id; one already released or expired is not there.
func (l *Loop) dropHold(id uint64) {
	for i, h := range l.holds {
		if h.id == id {
			l.holds = append(l.holds[:i], l.holds[i+1:]...)
			return
		}
	}
}

// runQueued runs the tasks and tail tasks queued now (not those they
// queue), with due timers first.
func (l *Loop) runQueued() int {
	l.moveDueTimers(l.clock.Now())
	ran := l.tasks.Drain(l.tasks.Len(), l.runTaskFn)
	ran += l.runTail()
	if ran > 0 {
		l.stats.tasks.Add(uint64(ran))
	}
	return ran
}

func (l *Loop) hasHooks() bool {
	l.hooksMu.Lock()
	defer l.hooksMu.Unlock()
	return len(l.hooks) > 0
}

// runHooks runs the shutdown hooks in registration order, each under
// recover, repeating while hooks added more hooks. It reports whether any
// ran.
func (l *Loop) runHooks() bool {
	ran := false
	for {
		l.hooksMu.Lock()
		hs := l.hooks
		l.hooks = nil
		l.hooksMu.Unlock()
		if len(hs) == 0 {
			return ran
		}
		for _, h := range hs {
			if h.removed.Load() {
				continue
			}
			ran = true
			h.removed.Store(true)
			l.runTask(hookTask{h.f})
		}
	}
}

type hookTask struct{ f func() }

func (h hookTask) Run() { h.f() }

// finish is the loop goroutine's epilogue (Netty's doStartThread finally
// block): it runs after confirmShutdown said yes, or after a failed start.
func (l *Loop) finish() {
	l.forceState(StateShutdown)
	l.waitSubmitters()
	// Anything accepted before the state changed runs now.
	for i := 0; i < 16 && (l.hasWork() || l.hasHooks()); i++ {
		l.runQueued()
		l.runHooks()
	}
	l.wheel.StopAll()
	if n := l.tasks.Len() + l.tail.Len(); n > 0 {
		l.logger.Warn("loop: tasks left unrun at termination", "loop", l.name, "count", n)
	}
	l.drainOps()
	l.nextWakeup.Store(awake)
	if err := l.drv.close(); err != nil {
		l.logger.Warn("loop: closing the backend failed", "loop", l.name, "err", err)
	}
	l.forgetTids()
	l.tid.Store(0)
	l.terminated()
}

// terminated publishes the end: state, Done, the group's count.
func (l *Loop) terminated() {
	l.state.Store(int32(StateTerminated))
	close(l.done)
	l.group.loopTerminated()
}

// drainOps cancels every live op (those being canceled again) and reaps
// completions until the op table is empty or the drain timeout passes
// (measured on the real clock, so an injected test clock cannot stall it).
func (l *Loop) drainOps() {
	if l.parked.len() > 0 {
		l.completeParked(nil) // not in the kernel: nothing to cancel there
	}
	if l.ops.inFlight == 0 {
		return
	}
	// Every live op, also those being canceled already: a cancel is
	// idempotent, and one lost earlier (submitted in a batch that dropped
	// it) would keep the drain waiting until its deadline.
	l.ops.each(func(o *op) {
		if l.drv.cancel(o) == nil {
			o.state = opCanceling
		}
	})
	deadline := time.Now().Add(l.cfg.drainTimeout)
	for l.ops.inFlight > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if _, err := l.drv.poll(min(left, shutdownPollInterval), maxCompletionsPerPoll, l); err != nil && !errors.Is(err, unix.EINTR) {
			l.logger.Warn("loop: reaping canceled ops failed", "loop", l.name, "err", err)
			break
		}
	}
	if n := l.ops.inFlight; n > 0 {
		l.stats.orphaned.Add(uint64(n))
		l.logger.Error("loop: ops still in flight after the drain deadline; their memory is quarantined", "loop", l.name, "count", n)
		// Give every one its final completion, marked Quarantined, so
		// no Completer waits for ever (a connection still closes and
		// reports OnClose); abandon keeps its record and buffers.
		var lost []*op
		bufs := false
		l.ops.each(func(o *op) {
			lost = append(lost, o)
			bufs = bufs || o.tag.providedRecv()
		})
		var extra uint64
		if bufs {
			extra = l.drv.quarantineBufs()
		}
		for _, o := range lost {
			var mine uint64
			if o.tag.providedRecv() {
				mine, extra = extra, 0 // the ring it may write into
			}
			l.abandon(o.userData(), -int32(unix.ECANCELED), 0, mine) // outcome unknown
		}
	}
	l.stats.opsInFlight.Store(int64(l.ops.inFlight))
}
