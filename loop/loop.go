package loop

import (
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringloop/ringloop/sched"
)

// A Loop is one event loop: one goroutine, locked to one OS thread for its
// whole life, that owns one backend (an io_uring ring or an epoll instance),
// a task queue, a timer wheel and an op table. Everything a Loop runs (tasks,
// timers, completions, hooks) runs on that goroutine, one at a time.
//
// A Loop is an executor: Execute, ExecuteAfterTurn and the Schedule
// methods queue work to it. Its socket operations are its IO (Loop.IO).
// Methods documented "Safe for concurrent use" may be called from any
// goroutine; the methods of IO (Accept, Recv, Send, …) must be called on
// the loop goroutine, i.e. from a task, a timer or a completion callback.
//
// The goroutine starts on first use (Execute, Schedule, …), not when the
// group is created.
type Loop struct {
	// Immutable after NewGroup.
	group    *Group
	index    int
	name     string
	cfg      *config
	logger   *slog.Logger
	clock    sched.Clock
	drv      driver
	fallback string // why auto chose epoll, if it did

	// Shared with other goroutines.
	state      atomic.Int32 // State
	waker      waker        // the wakeup protocol (wake.go)
	submitters atomic.Int64 // producers between their state check and the end of their push + wake
	ioRatio    atomic.Int32
	thread     loopThread    // the OS thread the loop runs on (thread.go)
	shutdown   shutdownState // graceful shutdown: its parameters, holds and hooks (shutdown.go)
	stats      counters
	tasks      *sched.Queue // immediate tasks and timers on their way to the wheel
	tail       *sched.Queue // tasks run once at the end of a turn
	wheel      *sched.Wheel // owned by the loop goroutine; NewTimer is concurrent-safe
	done       chan struct{}
	handOff    atomic.Bool            // the next wait gives the P back first (HandOffNextWait)
	delivered  int                    // completions since a shared-thread loop last waited (sharedYieldAfter); loop goroutine only
	what       atomic.Pointer[string] // what the loop runs, for the blocked-loop detector (Running)
	goid       atomic.Uint64          // the loop goroutine's id, for the detector's stack dump

	localsMu sync.Mutex
	locals   atomic.Pointer[[]any] // Local values, by Local.idx (local.go); copied on write under localsMu

	// Loop goroutine only.
	io               IO            // the op API and the ops' machinery (ops.go)
	stall            stallDetector // the stalled-ring detector (stall.go)
	tr               loopTrace     // runtime/trace regions of the turn (tracing.go)
	lastTaskRun      int64         // clock instant tasks or hooks last ran
	lastYield        int64         // clock instant the loop goroutine last yielded its P (yield.go)
	timersLeftBehind bool          // the last move of due timers found the task queue full
	dueNow           int64         // the instant moveDueTimers advances the wheel to
	runTaskFn        func(sched.Task)
	runTailFn        func(sched.Task)
	moveDueTimerFn   func(*sched.Timer) bool
}

func newLoop(g *Group, index int, drv driver, fallback string, ops *opTable) (*Loop, error) {
	c := g.cfg
	l := &Loop{
		group:    g,
		index:    index,
		name:     loopName(g, index),
		cfg:      c,
		logger:   c.logger,
		clock:    c.clock,
		drv:      drv,
		fallback: fallback,
		tasks:    sched.NewQueue(c.maxPending),
		tail:     sched.NewQueue(0),
		done:     make(chan struct{}),
	}
	// The task queue stamps each batch for the QueueDelay histogram.
	l.tasks.SetClock(c.clock)
	w, err := sched.NewWheel(sched.WheelConfig{Tick: c.tick, Clock: c.clock, Owner: (*futureOwner)(l)})
	if err != nil {
		return nil, err
	}
	l.wheel = w
	l.waker.l = l
	l.thread.l = l
	l.shutdown.l = l
	l.stall.l = l
	l.io.init(l, drv, ops)
	l.state.Store(int32(StateNotStarted))
	l.waker.nextWakeup.Store(awake)
	l.ioRatio.Store(int32(c.ioRatio))
	l.runTaskFn = l.runTask
	l.runTailFn = l.runTailTask
	l.moveDueTimerFn = l.moveDueTimer
	return l, nil
}

func loopName(g *Group, index int) string { return fmt.Sprintf("%s-%d", g.name, index) }

// String returns the loop's name, "<name>-<group id>-<index>" (for example
// "ringloop-1-0"), which is also its OS thread's name (first 15 bytes), its
// pprof label and its log attribute. Safe for concurrent use.
func (l *Loop) String() string { return l.name }

// Index returns the loop's position in its group. Safe for concurrent use.
func (l *Loop) Index() int { return l.index }

// Group returns the loop's group. Safe for concurrent use.
func (l *Loop) Group() *Group { return l.group }

// Logger returns the logger of the loop's group (WithLogger, else the
// slog.Default() of the group's creation), for packages that log on the
// loop's behalf. Safe for concurrent use.
func (l *Loop) Logger() *slog.Logger { return l.logger }

// State returns the loop's lifecycle state. Safe for concurrent use.
func (l *Loop) State() State { return State(l.state.Load()) }

// Done returns a channel closed when the loop has terminated: its tasks
// ran, its ops were reaped and its backend closed. Safe for concurrent use.
func (l *Loop) Done() <-chan struct{} { return l.done }

// Backend returns the backend the loop runs on (BackendUring or
// BackendEpoll). Safe for concurrent use.
func (l *Loop) Backend() Backend { return l.drv.backend() }

// Features reports what the loop's backend found in the kernel, and why
// BackendAuto fell back to epoll if it did. Safe for concurrent use.
func (l *Loop) Features() Features {
	f := l.drv.features()
	f.FallbackReason = l.fallback
	return f
}

// InLoop reports whether the caller runs on this loop's goroutine. Go has
// no goroutine identity, but a locked loop goroutine is the only one that
// ever runs on its OS thread, so InLoop compares gettid(2) with the id the
// loop recorded when it started, and reads that id again after the
// gettid: the loop still holding the thread then rules out a new thread
// given the id of the loop's, which ended with it. Safe for concurrent use.
func (l *Loop) InLoop() bool {
	if l.cfg.sharedThread {
		return l.thread.pinnedHere()
	}
	tid := l.thread.id.Load()
	return tid != 0 && gettid() == tid && l.thread.id.Load() == tid
}

// HandOffNextWait makes the loop's next wait give its thread's P back to
// the Go scheduler before it sleeps. Code running on the loop calls it
// after making a goroutine runnable (a channel send, a completed future
// with a waiter): on a locked thread that goroutine would otherwise wait
// for a P until sysmon retakes one (docs/loop.md, "Waiting"). Handing the
// P off costs a thread wakeup, so the loop does it only when asked, for one
// wait; a shared-thread loop always leaves the P free and ignores it.
// Safe for concurrent use (called off the loop it applies to the loop's
// next wait, which is harmless).
func (l *Loop) HandOffNextWait() { l.handOff.Store(true) }

// Idle reports whether the loop is, at this moment, waiting between turns
// (for I/O, a task or a timer) rather than running one. Work handed to an
// idle loop from another goroutine costs it a wakeup; work handed to a
// running loop is picked up by its current or next turn without one (a
// loop not started yet, which the first work starts, is not idle). The
// answer may be stale as soon as it returns, so it serves to choose between
// two correct paths, never for correctness. Safe for concurrent use.
func (l *Loop) Idle() bool { return l.waker.nextWakeup.Load() != awake }

// IO returns the loop's op API: accept, receive, send, connect, close,
// shutdown and cancel, with completions delivered on the loop goroutine.
// Safe for concurrent use; the methods of IO must be called on the loop
// goroutine.
func (l *Loop) IO() *IO { return &l.io }

// running maps the OS thread id of every running loop to its Loop.
var running sync.Map // int32 → *Loop

// busyLoops counts the loop goroutines of the process that may be running
// code: started and not inside their blocking wait. While it is zero no
// caller can be a loop goroutine, and Current answers without a system
// call, which is what a blocking call on a busy adapter connection meets
// most: its loop asleep in the kernel.
var busyLoops atomic.Int32

// enterWait and leaveWait bracket a loop's blocking wait, or another
// system call of its turn that may run long, in which it runs no callback.
func enterWait() { busyLoops.Add(-1) }
func leaveWait() { busyLoops.Add(1) }

// Current returns the loop whose goroutine calls it (from a task, a timer
// or a callback of any group), or nil off every loop. Blocking calls use it
// to refuse to block a loop (ErrInLoop). It costs one atomic load while
// every loop sleeps in its wait, and a gettid(2) otherwise. Safe for
// concurrent use.
//
// The caller is pinned to its thread from the gettid to the end of the
// lookup. Unpinned, the scheduler could move it to another thread right
// after the gettid, and a loop could start on the thread it left (the
// goroutine that starts a loop waits for the start, which frees its thread
// for the new loop goroutine): the stale id would then name a loop the
// caller is not on. Pinned, the id stays the caller's, and a loop that
// records it as its own (which a loop does only while it holds the thread,
// locked, and so runs alone on it) is the caller's.
func Current() *Loop {
	if busyLoops.Load() == 0 {
		return nil
	}
	runtime.LockOSThread()
	l := currentPinned()
	runtime.UnlockOSThread()
	return l
}

// currentPinned is Current for a caller pinned to its thread.
func currentPinned() *Loop {
	tid := gettid()
	if tid == 0 {
		return nil
	}
	if v, ok := running.Load(tid); ok {
		// The entry may be stale: a shared-thread loop that has left
		// this thread (and another goroutine runs here now).
		if l := v.(*Loop); l.thread.id.Load() == tid {
			return l
		}
	}
	return nil
}

// Execute queues f to run on the loop and wakes the loop if it is waiting
// (at most one eventfd write per wait, and none from the loop itself). The
// first call starts the loop goroutine. It returns ErrNilTask for a nil f,
// and an error wrapping ErrRejected once the loop is shut down or when its
// bounded queue is full. Tasks run in the order each goroutine queued them.
// If starting the loop fails (its backend cannot start on the new thread),
// the call that started it returns an error wrapping ErrRejected and the
// cause, and the loop terminates for good; f, already queued, still runs
// during that termination. Queuing f adds no allocation of its own: a func
// made once (such as a method value kept in a field) can be queued again and
// again for free. Safe for concurrent use.
func (l *Loop) Execute(f func()) error {
	if f == nil {
		return ErrNilTask
	}
	return l.submit(l.tasks, sched.TaskFunc(f))
}

// ExecuteAfterTurn queues f as a tail task: it runs once, at the end of the
// current (or next) loop turn, after the turn's tasks, also on turns that
// ran no task (Netty's executeAfterEventLoopIteration). A pending tail task
// keeps the loop from blocking. It returns errors as Execute does. Safe for
// concurrent use.
func (l *Loop) ExecuteAfterTurn(f func()) error {
	if f == nil {
		return ErrNilTask
	}
	return l.submit(l.tail, sched.TaskFunc(f))
}

// Now reads the clock the loop's timers run on: the time since an
// arbitrary origin fixed for the process (the monotonic clock, unless a
// test replaced it). Differences between two readings are elapsed times,
// and a timer scheduled for d fires once Now has advanced by d. A read
// makes no system call. Safe for concurrent use.
func (l *Loop) Now() time.Duration { return time.Duration(l.clock.Now()) }

// Schedule runs f once on the loop after d (d <= 0: as soon as possible).
// The returned timer can be stopped (Stop) and observed (Future: a future
// of the loop, as NewFuture makes, whose Wait on this loop's goroutine
// returns an error wrapping ErrInLoop while the timer is pending). Timers
// with equal deadlines run in the order they were scheduled. A timer
// scheduled from another goroutine wakes the loop only if it is due before
// the loop's current wait ends. Once a graceful shutdown began, Schedule
// returns an error wrapping ErrRejected. Safe for concurrent use.
func (l *Loop) Schedule(d time.Duration, f func()) (*sched.Timer, error) {
	if f == nil {
		return nil, ErrNilTask
	}
	return l.scheduleTimer(l.wheel.NewTimer(l.deadline(d), f))
}

// ScheduleAtFixedRate runs f first after initial and then every period,
// counted from the first deadline, so the schedule never drifts; after a
// stall the missed runs follow one per turn. A panic in f stops the timer
// and fails its future. period must be positive. Safe for concurrent use.
func (l *Loop) ScheduleAtFixedRate(initial, period time.Duration, f func()) (*sched.Timer, error) {
	if f == nil {
		return nil, ErrNilTask
	}
	t, err := l.wheel.NewFixedRate(l.deadline(initial), period, f)
	if err != nil {
		err = invalidArgument("period %v: %w", period, err)
	}
	return l.scheduleTimer(t, err)
}

// ScheduleWithFixedDelay runs f first after initial and then delay after
// each run ends. A panic in f stops the timer and fails its future. delay
// must be positive. Safe for concurrent use.
func (l *Loop) ScheduleWithFixedDelay(initial, delay time.Duration, f func()) (*sched.Timer, error) {
	if f == nil {
		return nil, ErrNilTask
	}
	t, err := l.wheel.NewFixedDelay(l.deadline(initial), delay, f)
	if err != nil {
		err = invalidArgument("delay %v: %w", delay, err)
	}
	return l.scheduleTimer(t, err)
}

// deadline turns a delay into a wheel deadline, saturating: a delay too
// long to add to the clock (up to math.MaxInt64, about 292 years) means
// never, not a negative deadline that fires at once.
func (l *Loop) deadline(d time.Duration) int64 {
	now := l.clock.Now()
	if d <= 0 {
		return now
	}
	if int64(d) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(d)
}

// rebuildRing asks the loop to replace its ring (or epoll instance) and
// migrate every live op to the new one, as the stalled-ring detector does.
// The work always runs on the loop goroutine, as a task queued by this
// call, which returns once it is queued. It is counted in Stats.Rebuilds.
// Tests call it (testknobs.RebuildRing). Safe for concurrent use.
func (l *Loop) rebuildRing() error {
	return l.submit(l.tasks, sched.TaskFunc(func() { l.io.rebuild("requested") }))
}

// DelayTermination keeps the loop, once shutting down, from terminating
// until release is called, limit passes or the shutdown's timeout passes,
// whichever comes first, quiet period or not: for work the loop's ops carry
// on with no task to show for it, such as a connection sending its queued
// bytes as its loop shuts down (for at most its linger time). Calling
// release again does nothing. Must be called on the loop goroutine, and so
// must release.
func (l *Loop) DelayTermination(limit time.Duration) (release func()) {
	l.assertLoop()
	s := &l.shutdown
	s.lastHoldID++
	id := s.lastHoldID
	s.holds = append(s.holds, hold{id: id, until: l.deadline(limit)})
	return func() {
		l.assertLoop()
		s.dropHold(id)
	}
}

// AddShutdownHook registers f to run on the loop during its graceful
// shutdown, after the quiet period's tasks. Hooks run in registration order,
// each under recover; hooks added by hooks run too, until none is left. The
// returned function removes f if it has not run yet. Safe for concurrent use.
func (l *Loop) AddShutdownHook(f func()) (remove func(), err error) {
	if f == nil {
		return nil, ErrNilTask
	}
	l.submitters.Add(1)
	defer l.submitters.Add(-1)
	if State(l.state.Load()) >= StateShutdown {
		return nil, errRejectedShutdown
	}
	h := &hook{f: f}
	s := &l.shutdown
	s.hooksMu.Lock()
	s.hooks = append(s.hooks, h)
	s.hooksMu.Unlock()
	return func() { h.removed.Store(true) }, nil
}

// ShutdownGracefully starts the loop's graceful shutdown and returns at once
// (wait on Done): tasks are still accepted and run until no task ran for
// quiet, or until timeout passed since this call, whichever comes first;
// then hooks run, timers are canceled, ops are canceled and reaped, and the
// backend is closed. A loop that never started terminates at once. Calling it
// again has no effect. quiet must be >= 0 and timeout >= quiet.
// Safe for concurrent use.
func (l *Loop) ShutdownGracefully(quiet, timeout time.Duration) error {
	if err := checkShutdownArgs(quiet, timeout); err != nil {
		return err
	}
	l.shutdown.begin(quiet, timeout)
	return nil
}

// Stats returns a snapshot of the loop's counters. Safe for concurrent use.
func (l *Loop) Stats() Stats {
	var s Stats
	l.stats.snapshot(&s)
	l.drv.counters(&s)
	s.Name = l.name
	s.State = l.State()
	s.Backend = l.drv.backend()
	s.PendingTasks = l.tasks.Len()
	return s
}

// submit is the common path of Execute, ExecuteAfterTurn and
// the posting of timers and internal tasks.
//
// The submitters count brackets the state check, the push, the start and the
// wake. A terminating loop sets its state to StateShutdown and then waits for
// submitters to reach zero before its last drain and before it closes the
// backend, so a task is either rejected or run, never silently dropped, and
// no eventfd write can race with the eventfd's close (the Dekker pattern:
// producer increments then reads the state, the loop writes the state then
// reads the count; sequentially consistent atomics make one see the other).
func (l *Loop) submit(q *sched.Queue, t sched.Task) error {
	l.submitters.Add(1)
	if State(l.state.Load()) >= StateShutdown {
		l.submitters.Add(-1)
		l.stats.rejected.Add(1)
		return errRejectedShutdown
	}
	if err := q.Push(t); err != nil {
		l.rejectedFull()
		return errRejectedFull
	}
	err := l.ensureStarted()
	if err == nil {
		l.waker.wake()
	}
	l.submitters.Add(-1)
	return err
}

// rejectedFull ends a submission refused by a full queue: counted, and the
// loop woken if it waits. A full queue can be made of tasks that did not
// wake it (timers due after its wait ends); without this wakeup
// every producer would be refused until that wait ended on its own (up to a
// second), since a refused task wakes nothing. Called with submitters held,
// so the eventfd is still open.
func (l *Loop) rejectedFull() {
	l.stats.rejected.Add(1)
	l.waker.wake()
	l.submitters.Add(-1)
}

// scheduleTimer posts a new timer (unless err says it could not be made) to
// the loop (Timer.Run inserts it into the wheel on the loop goroutine) and
// wakes the loop only if the timer is due before the loop's published wait
// deadline. On the loop itself it inserts the timer directly, so a full
// task queue never refuses it.
func (l *Loop) scheduleTimer(t *sched.Timer, err error) (*sched.Timer, error) {
	if err != nil {
		return nil, err
	}
	when := t.When() // read before the loop owns the timer
	l.submitters.Add(1)
	if s := State(l.state.Load()); s >= StateShuttingDown {
		l.submitters.Add(-1)
		l.stats.rejected.Add(1)
		if s == StateShuttingDown {
			return nil, errRejectedShuttingDown
		}
		return nil, errRejectedShutdown
	}
	if l.InLoop() {
		// On the loop the timer goes into the wheel at once: never
		// refused by a full task queue (Netty's in-loop schedule), and
		// the loop, running, needs no wakeup.
		t.Run()
		l.submitters.Add(-1)
		return t, nil
	}
	if err := l.tasks.Push(t); err != nil {
		l.rejectedFull()
		return nil, errRejectedFull
	}
	err = l.ensureStarted()
	if err == nil {
		l.waker.wakeBefore(when)
	}
	l.submitters.Add(-1)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// ensureStarted starts the loop goroutine if it has not started: exactly
// one caller wins the NotStarted → Started CAS and waits until the goroutine
// has locked its thread and started the backend, so a start failure is
// reported to that caller.
//
// A failed start is final (Netty's is not): the ring was enabled by, and
// with SINGLE_ISSUER bound to, the thread that failed, so a retry would run
// on a half-set-up backend. The loop terminates instead: the caller gets an
// error wrapping ErrRejected and the cause, the tasks accepted until then
// run as it terminates, and later submissions return ErrRejected.
func (l *Loop) ensureStarted() error {
	if State(l.state.Load()) != StateNotStarted {
		return nil
	}
	if !l.state.CompareAndSwap(int32(StateNotStarted), int32(StateStarted)) {
		return nil
	}
	errc := make(chan error, 1)
	go l.main(errc)
	if err := <-errc; err != nil {
		return rejected(fmt.Errorf("start %s: %w", l.name, err))
	}
	return nil
}
