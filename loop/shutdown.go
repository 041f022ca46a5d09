package loop

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
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

// shutdownState is a loop's graceful shutdown: the parameters it was
// started with, the holds that delay termination, the shutdown hooks, and
// the steps that end the loop.
type shutdownState struct {
	l *Loop

	// Shared with other goroutines.
	quiet       atomic.Int64 // quiet period, ns
	timeout     atomic.Int64 // timeout, ns
	requestedAt atomic.Int64 // clock instant ShutdownGracefully was called
	beginMu     sync.Mutex   // one caller at a time sets the three above and starts the shutdown
	hooksMu     sync.Mutex
	hooks       []*hook

	// Loop goroutine only.
	confirming bool   // confirm ran at least once
	holds      []hold // DelayTermination holds not yet released
	lastHoldID uint64
}

// hook is a shutdown hook; removed is set by its removal function.
type hook struct {
	f       func()
	removed atomic.Bool
}

// begin starts the graceful shutdown (ShutdownGracefully): a loop that
// never started terminates at once, a started one goes to ShuttingDown and
// is woken; a loop already shutting down is left as it is.
func (s *shutdownState) begin(quiet, timeout time.Duration) {
	l := s.l
	l.submitters.Add(1)
	for {
		switch State(l.state.Load()) {
		case StateNotStarted:
			if l.state.CompareAndSwap(int32(StateNotStarted), int32(StateShutdown)) {
				l.submitters.Add(-1)
				s.terminateUnstarted()
				return
			}
		case StateStarted:
			// The parameters go out before the state (the loop reads them
			// once it sees ShuttingDown), and only the caller that moves
			// the state sets them: concurrent callers do not mix theirs.
			s.beginMu.Lock()
			if State(l.state.Load()) != StateStarted {
				s.beginMu.Unlock()
				continue
			}
			s.quiet.Store(int64(quiet))
			s.timeout.Store(int64(timeout))
			s.requestedAt.Store(l.clock.Now())
			started := l.state.CompareAndSwap(int32(StateStarted), int32(StateShuttingDown))
			s.beginMu.Unlock()
			if started {
				l.waker.wake()
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
func (s *shutdownState) terminateUnstarted() {
	l := s.l
	s.waitSubmitters()
	if l.hasWork() || s.hasHooks() {
		go l.main(make(chan error, 1))
		return
	}
	if err := l.drv.close(); err != nil {
		l.logger.Warn("loop: closing the backend failed", "loop", l.name, "err", err)
	}
	s.terminated()
}

// waitSubmitters waits until no producer is between its state check and the
// end of its push and wake. Producers hold that window for a few
// instructions (or, for the first Execute, until the loop started).
func (s *shutdownState) waitSubmitters() {
	l := s.l
	for l.submitters.Load() != 0 {
		runtime.Gosched()
	}
}

// forceState raises the loop's state to at least to.
func (s *shutdownState) forceState(to State) {
	for {
		cur := s.l.state.Load()
		if State(cur) >= to || s.l.state.CompareAndSwap(cur, int32(to)) {
			return
		}
	}
}

// waitBound bounds a wait while shutting down: until the quiet period
// and every hold, or the timeout, could end, at most shutdownPollInterval,
// at least a tick.
func (s *shutdownState) waitBound(now int64) time.Duration {
	l := s.l
	d := shutdownPollInterval
	if s.confirming {
		// Not before the quiet period ends, nor, while holds remain, before
		// the last one's limit (a release comes in a turn, which confirms
		// again at once).
		end := l.lastTaskRun + s.quiet.Load()
		for _, h := range s.holds {
			end = max(end, h.until)
		}
		if q := time.Duration(end - now); q < d {
			d = q
		}
		if t := time.Duration(s.requestedAt.Load() + s.timeout.Load() - now); t < d {
			d = t
		}
	}
	return max(d, l.cfg.tick)
}

// confirmSafely runs confirm; a panic in it ends the loop.
func (s *shutdownState) confirmSafely() (done bool) {
	l := s.l
	defer func() {
		if r := recover(); r != nil {
			l.stats.panics.Add(1)
			l.logger.Error("loop: unexpected panic while shutting down", "loop", l.name, "panic", r)
			done = true
		}
	}()
	return s.confirm()
}

// confirm reports whether the shutdown may complete. It runs on the
// loop after every turn once the state is ShuttingDown or later.
func (s *shutdownState) confirm() bool {
	l := s.l
	now := l.clock.Now()
	if !s.confirming {
		s.confirming = true
		l.lastTaskRun = max(l.lastTaskRun, now) // the quiet period starts no earlier than now
	}
	l.wheel.StopAll()
	ran := s.runQueued() > 0
	if s.runHooks() {
		ran = true
	}
	if State(l.state.Load()) >= StateShutdown {
		return true
	}
	now = l.clock.Now()
	if now-s.requestedAt.Load() >= s.timeout.Load() {
		return true
	}
	if s.held(now) {
		return false // DelayTermination: until released, its limit or the timeout
	}
	quiet := s.quiet.Load()
	if ran {
		l.lastTaskRun = now
		return quiet == 0
	}
	return quiet == 0 || now-l.lastTaskRun > quiet
}

// hold is a DelayTermination hold: its id and the clock instant its limit
// passes (math.MaxInt64 for a limit too long to add to the clock).
type hold struct {
	id    uint64
	until int64
}

// held reports whether a hold not yet released keeps the loop from
// terminating at now. Holds whose limit passed are dropped.
func (s *shutdownState) held(now int64) bool {
	k := 0
	for _, h := range s.holds {
		if now < h.until {
			s.holds[k] = h
			k++
		}
	}
	clear(s.holds[k:])
	s.holds = s.holds[:k]
	return k > 0
}

// dropHold removes hold id; one already released or expired is not there.
func (s *shutdownState) dropHold(id uint64) {
	for i, h := range s.holds {
		if h.id == id {
			s.holds = append(s.holds[:i], s.holds[i+1:]...)
			return
		}
	}
}

// runQueued runs the tasks and tail tasks queued now (not those they
// queue), with due timers first.
func (s *shutdownState) runQueued() int {
	l := s.l
	l.moveDueTimers(l.clock.Now())
	ran := l.tasks.Drain(l.tasks.Len(), l.runTaskFn)
	ran += l.runTail()
	if ran > 0 {
		l.stats.tasks.Add(uint64(ran))
	}
	l.tasks.BatchesTaken() // outside a task phase: not a QueueDelay sample
	return ran
}

// hasHooks reports whether shutdown hooks wait to run.
func (s *shutdownState) hasHooks() bool {
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	return len(s.hooks) > 0
}

// runHooks runs the shutdown hooks in registration order, each under
// recover, repeating while hooks added more hooks. It reports whether any
// ran.
func (s *shutdownState) runHooks() bool {
	l := s.l
	ran := false
	for {
		s.hooksMu.Lock()
		hs := s.hooks
		s.hooks = nil
		s.hooksMu.Unlock()
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
// block): it runs after confirm said yes, or after a failed start.
func (s *shutdownState) finish() {
	l := s.l
	s.forceState(StateShutdown)
	s.waitSubmitters()
	// Tasks, hooks and the completions of the drain are user code: one
	// calling runtime.Goexit here unwinds past the rest, which must still
	// close the backend and publish the end, or Done never closes.
	released := false
	defer func() {
		if !released {
			l.stats.panics.Add(1)
			l.logger.Error("loop: runtime.Goexit called on the loop goroutine while it terminated (by a task, hook or callback); what was left to run is skipped",
				"loop", l.name)
			s.release()
		}
	}()
	// Anything accepted before the state changed runs now.
	for i := 0; i < 16 && (l.hasWork() || s.hasHooks()); i++ {
		s.runQueued()
		s.runHooks()
	}
	if n := l.tasks.Len() + l.tail.Len(); n > 0 {
		l.logger.Warn("loop: tasks left unrun at termination", "loop", l.name, "count", n)
	}
	l.io.drain()
	released = true
	s.release()
}

// release ends a terminating loop: it stops its timers, closes the backend
// (the kernel cancels what is still in flight), forgets the loop's thread
// and publishes the end. No user code runs in it.
func (s *shutdownState) release() {
	l := s.l
	l.wheel.StopAll()
	l.waker.nextWakeup.Store(awake)
	l.tr.endTask()
	if err := l.drv.close(); err != nil {
		l.logger.Warn("loop: closing the backend failed", "loop", l.name, "err", err)
	}
	l.thread.leave()
	s.terminated()
}

// terminated publishes the end: state, Done, the group's count.
func (s *shutdownState) terminated() {
	l := s.l
	l.state.Store(int32(StateTerminated))
	close(l.done)
	l.group.loopTerminated()
}

// drain cancels every live op (those being canceled again) and reaps
// completions until the op table is empty or the drain timeout passes
// (measured on the real clock, so an injected test clock cannot stall it).
func (io *IO) drain() {
	l := io.l
	if io.parked.len() > 0 {
		io.parked.endMatching(nil) // not in the kernel: nothing to cancel there
	}
	if io.ops.inFlight == 0 {
		return
	}
	// Every live op, also those being canceled already: a cancel is
	// idempotent, and one lost earlier (submitted in a batch that dropped
	// it) would keep the drain waiting until its deadline.
	io.ops.each(func(o *op) {
		if io.drv.cancel(o) == nil {
			o.state = opCanceling
		}
	})
	deadline := time.Now().Add(l.cfg.drainTimeout)
	for io.ops.inFlight > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if _, err := io.drv.poll(min(left, shutdownPollInterval), maxCompletionsPerPoll, io); err != nil && !errors.Is(err, unix.EINTR) {
			l.logger.Warn("loop: reaping canceled ops failed", "loop", l.name, "err", err)
			break
		}
	}
	if n := io.ops.inFlight; n > 0 {
		l.stats.orphaned.Add(uint64(n))
		l.logger.Error("loop: ops still in flight after the drain deadline; their memory is quarantined", "loop", l.name, "count", n)
		// Give every one its final completion, marked Quarantined, so
		// no Completer waits for ever (a connection still closes and
		// reports OnClose); abandon keeps its record and buffers.
		var lost []*op
		bufs := false
		io.ops.each(func(o *op) {
			lost = append(lost, o)
			bufs = bufs || o.tag.providedRecv()
		})
		var extra uint64
		if bufs {
			extra = io.drv.quarantineBufs()
		}
		for _, o := range lost {
			var mine uint64
			if o.tag.providedRecv() {
				mine, extra = extra, 0 // the ring it may write into
			}
			io.abandon(o.userData(), -int32(unix.ECANCELED), 0, mine) // outcome unknown
		}
	}
	l.stats.opsInFlight.Store(int64(io.ops.inFlight))
}
