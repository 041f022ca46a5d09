package sched

import (
	"math"
	"sync/atomic"
)

// Timer states, kept in Timer.state. Stop may run on any goroutine; every
// other transition happens on the goroutine that owns the timer's wheel.
//
//	         Stop                               Stop (periodic only)
//	canceled ◄───── pending ──── Run ────► running ─────────────────► canceled
//	                  ▲                      │ │ │
//	                  │ periodic: next run   │ │ └─ task panics ──────► failed
//	                  └──────────────────────┘ └─── one-shot returns ─► fired
//
//	Reset (owner): any state ──► pending, re-armed with a new deadline.
//
// "pending" covers every place a scheduled timer can be: on its way to the
// owner through a queue, in a wheel slot, in the wheel's ready list, or
// handed to the sink and waiting in the task queue for Run. Stop and Run race
// on the single CAS out of pending, so for a one-shot arming exactly one of
// "Stop returned true" and "the task ran" happens.
const (
	statePending uint32 = iota // zero: a new timer is armed
	stateRunning
	stateFired
	stateCanceled
	stateFailed
)

// Timer locations, kept in Timer.loc and touched only by the wheel's owner.
// They tell the wheel which list to unlink the timer from in O(1), and tell
// Run whether it has been handed a due timer or a stale queue entry.
const (
	locNone      uint32 = iota // on no list: not yet added, running, or finished
	locDelivered               // handed to the sink by Advance; Run will run it
	locReady                   // due, in the wheel's ready list
	locOverflow                // beyond the wheel's range, in the overflow list
	locSlot0                   // locSlot0 + level*slotsPerLevel + slot: in that slot
)

// A Timer runs a function once at a deadline (one-shot), or repeatedly at a
// fixed rate or with a fixed delay, on the goroutine that owns its [Wheel].
//
// A Timer is created armed by [Wheel.NewTimer], [Wheel.NewFixedRate] or
// [Wheel.NewFixedDelay] on any goroutine. It reaches the wheel either by
// [Wheel.Add] on the owner goroutine, or by being pushed to the owner's task
// [Queue]: a Timer is a [Task], and when the owner runs a timer that is not
// yet in the wheel, Run inserts it. [Wheel.Advance] later hands the due timer
// to the sink (normally the same queue), and Run then runs the function and
// re-inserts a periodic timer.
//
// A Timer is 64 bytes; the fields a few timers need (period, future) live in
// a side record allocated only for periodic timers or when [Timer.Future] is
// called.
type Timer struct {
	fn    func()
	wheel *Wheel                   // owner; immutable
	when  int64                    // deadline in clock nanoseconds; owner only
	seq   uint64                   // insertion sequence, breaks deadline ties; owner only
	prev  *Timer                   // list links; owner only
	next  *Timer                   //
	ext   atomic.Pointer[timerExt] // nil for a one-shot timer nobody asked a future of
	state atomic.Uint32            // statePending …; see the diagram above
	loc   uint32                   // locNone …; owner only
}

// timerExt holds what only some timers need.
type timerExt struct {
	period int64                            // > 0 fixed rate, < 0 fixed delay (negated), 0 one-shot; immutable
	fut    atomic.Pointer[Future[struct{}]] // created on demand by Timer.Future
}

// period returns the timer's period (see timerExt.period).
func (t *Timer) period() int64 {
	if e := t.ext.Load(); e != nil {
		return e.period
	}
	return 0
}

// Stop prevents the timer from running and reports whether it did so: true
// if the timer was pending (or, for a periodic timer, if it was running and
// will now not run again), false if it had already run, failed or been
// stopped. Stop does not wait for a running task. The timer stays in its
// wheel until it comes due and is then dropped; [Wheel.Stop] unlinks at once.
// The timer's future, if any, fails with [ErrCanceled]. Safe for concurrent
// use.
func (t *Timer) Stop() bool {
	for {
		s := t.state.Load()
		switch {
		case s == stateRunning && t.period() == 0:
			return false // a one-shot task already started
		case s != statePending && s != stateRunning:
			return false
		}
		if t.state.CompareAndSwap(s, stateCanceled) {
			t.complete(ErrCanceled)
			return true
		}
	}
}

// Reset re-arms the timer to run at when (a [Clock] instant), whatever its
// state, and reports whether it was pending, i.e. whether Reset replaced a
// run that had not happened yet. It may be called from the timer's own
// function. A periodic timer keeps its period, counted from when. Reset
// detaches a completed future: [Timer.Future] then describes the new arming.
// Must be called on the goroutine that owns the wheel.
func (t *Timer) Reset(when int64) bool {
	w := t.wheel
	w.unlink(t)
	var stale *Future[struct{}]
	e := t.ext.Load()
	if e != nil {
		stale = e.fut.Load()
	}
	old := t.state.Swap(statePending)
	if old >= stateFired && stale != nil {
		e.fut.CompareAndSwap(stale, nil)
	}
	t.when = when
	w.add(t)
	return old == statePending
}

// When returns the timer's deadline as a [Clock] instant; for a periodic
// timer, the deadline of its next run. Call it before handing the timer to
// the wheel's owner, or on the owner goroutine.
func (t *Timer) When() int64 { return t.when }

// Future returns a future completed when this arming of the timer ends: with
// a nil error after a one-shot run, [ErrCanceled] after [Timer.Stop], or a
// [*PanicError] if the task panicked (which also ends a periodic timer). The
// future is allocated on the first call; its owner is the wheel's
// ([WheelConfig.Owner]). Safe for concurrent use.
func (t *Timer) Future() *Future[struct{}] {
	e := t.ext.Load()
	if e == nil {
		e = &timerExt{}
		if !t.ext.CompareAndSwap(nil, e) {
			e = t.ext.Load()
		}
	}
	f := e.fut.Load()
	if f == nil {
		f = NewFutureOn[struct{}](t.wheel.owner)
		if !e.fut.CompareAndSwap(nil, f) {
			f = e.fut.Load()
		}
	}
	// The state is read after the future is published: either this call sees
	// the final state and completes the future, or the goroutine that set the
	// state sees the future and completes it (Complete is set-once). A failed
	// timer's future is completed by the failing path, which always creates it.
	switch t.state.Load() {
	case stateFired:
		f.Complete(struct{}{}, nil)
	case stateCanceled:
		f.Complete(struct{}{}, ErrCanceled)
	}
	return f
}

// complete completes the timer's future, if one was asked for, with err.
func (t *Timer) complete(err error) {
	if e := t.ext.Load(); e != nil {
		if f := e.fut.Load(); f != nil {
			f.Complete(struct{}{}, err)
		}
	}
}

// Run is the timer's [Task] method, called by the owner's task loop.
//
//   - A pending timer that is in no wheel yet (created on another goroutine
//     and pushed to the owner's queue) is inserted into its wheel.
//   - A timer handed out by [Wheel.Advance] runs its function, unless it was
//     stopped meanwhile. A one-shot timer then becomes fired; a periodic one
//     is re-inserted at its next deadline: the previous deadline plus the
//     period for fixed rate (so it never drifts and catches up after a
//     stall), the clock after the run plus the delay for fixed delay.
//   - Anything else (a stale queue entry for a timer that was reset or
//     stopped after delivery) is ignored.
//
// If the function panics the timer becomes failed, its future fails with a
// [*PanicError], and Run panics again with that same *PanicError, so the
// task loop's [Run] reports it once. Must be called on the goroutine that owns
// the wheel.
func (t *Timer) Run() {
	switch t.loc {
	case locNone:
		if t.state.Load() == statePending {
			t.wheel.add(t)
		}
		return
	case locDelivered:
		t.loc = locNone
	default:
		return
	}
	if !t.state.CompareAndSwap(statePending, stateRunning) {
		return // stopped after it was delivered
	}
	ok := false
	defer func() {
		if !ok {
			t.fail(recover())
		}
	}()
	t.fn()
	ok = true
	t.finish()
}

// finish moves a timer whose function returned to its next state. If the
// function re-armed (Reset) or stopped the timer, the CAS fails and the
// timer is left as the function left it.
func (t *Timer) finish() {
	p := t.period()
	if p == 0 {
		if t.state.CompareAndSwap(stateRunning, stateFired) {
			t.complete(nil)
		}
		return
	}
	var next int64
	if p > 0 {
		next = addSat(t.when, p)
	} else {
		next = addSat(t.wheel.clock.Now(), -p)
	}
	if t.state.CompareAndSwap(stateRunning, statePending) {
		t.when = next
		t.wheel.add(t)
	}
}

// fail records a panic (r == nil means runtime.Goexit) and re-raises it.
func (t *Timer) fail(r any) {
	pe := asPanicError(r)
	if t.state.CompareAndSwap(stateRunning, stateFailed) {
		t.Future().Complete(struct{}{}, pe)
	}
	if r != nil {
		panic(pe)
	}
}

// addSat returns a+b for b >= 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
