package loop

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"time"

	"github.com/ringloop/ringloop/sched"
)

// maxCompletionsPerPoll bounds the completions one poll dispatches, so a
// burst of I/O cannot postpone the task phase indefinitely (hard-coded; the
// CQ holds twice the ring entries, 8192 by default, and what is left stays
// there for the next turn).
const maxCompletionsPerPoll = 1024

// taskCheckInterval is how many tasks run between two clock reads in the
// task phase (docs/decisions.md, "Clock reads in the task phase").
const taskCheckInterval = 64

// shutdownPollInterval bounds a wait while shutting down, so the quiet
// period and the timeout are checked at least this often; a new task ends
// the wait at once.
const shutdownPollInterval = 100 * time.Millisecond

// main is the loop goroutine.
func (l *Loop) main(errc chan<- error) {
	// Never unlocked: the goroutine owns this thread for life, the ring's
	// single issuer (IORING_SETUP_SINGLE_ISSUER) is this thread, and when the
	// goroutine returns still locked the runtime ends the thread with it.
	runtime.LockOSThread()
	l.thread.enter()
	l.goid.Store(goroutineID())
	l.group.startWatchdog()
	busyLoops.Add(1)
	defer busyLoops.Add(-1)
	if l.cfg.sharedThread {
		// Unlocked between turns (thread.go); the thread is not the
		// loop's to name, nor to end when the goroutine returns.
		defer runtime.UnlockOSThread()
	} else if int(l.thread.id.Load()) != os.Getpid() {
		// Not the main thread: its name is the process's (ps, pidof,
		// /proc/<pid>/comm), which a loop must not take.
		setThreadName(l.name)
	}
	labels := pprof.Labels("ringloop.group", l.group.name, "ringloop.loop", strconv.Itoa(l.index))
	pprof.Do(context.Background(), labels, func(context.Context) { l.body(errc) })
}

// setThreadName names the calling OS thread, as prctl(PR_SET_NAME) does,
// so top -H, perf and /proc show which loop is which. It writes
// /proc/thread-self/comm (the same kernel field; the prctl form would need
// unsafe, which loop does not import). The kernel keeps 15 bytes.
func setThreadName(name string) {
	if len(name) > 15 {
		name = name[:15]
	}
	_ = os.WriteFile("/proc/thread-self/comm", []byte(name), 0)
}

func (l *Loop) body(errc chan<- error) {
	err := faultStart()
	if err == nil {
		err = l.drv.start()
	}
	if err != nil {
		errc <- err
		l.logger.Error("loop: backend start failed", "loop", l.name, "err", err)
		l.shutdown.forceState(StateShutdown)
		l.shutdown.finish()
		return
	}
	errc <- nil
	l.lastTaskRun = l.clock.Now()
	// runtime.Goexit in a task or callback (t.FailNow in a test handler
	// does it) unwinds past every recover; without this the goroutine
	// would vanish with the loop still Started, its tasks never run and
	// its shutdown never ending. The loop terminates instead, as on a
	// shutdown: queued tasks run, ops are canceled and drained, waiters
	// are released, and the cause is logged and counted.
	exiting := true
	defer func() {
		if exiting {
			l.tr.end()
			l.stats.panics.Add(1)
			l.logger.Error("loop: runtime.Goexit called on the loop goroutine (by a task or callback); the loop terminates",
				"loop", l.name, "stack", string(debug.Stack()))
			l.shutdown.finish()
		}
	}()
	for {
		l.safeTurn()
		if State(l.state.Load()) >= StateShuttingDown && l.shutdown.confirmSafely() {
			break
		}
	}
	exiting = false
	l.shutdown.finish()
}

// safeTurn runs one turn; a panic escaping it (a backend bug: tasks and
// completions have their own recover) is logged and counted, and the loop
// goes on, as Netty's handleLoopException does.
func (l *Loop) safeTurn() {
	defer func() {
		if r := recover(); r != nil {
			l.tr.end()
			l.stats.panics.Add(1)
			l.logger.Error("loop: unexpected panic in the run cycle", "loop", l.name, "panic", r)
			time.Sleep(time.Millisecond) // do not spin on a persistent failure
		}
	}()
	l.turn()
}

// turn is one run-cycle iteration (docs/loop.md, "One turn"): wait (not at
// all if work is queued or a timer is due, else until the wheel's next
// deadline, published through nextWakeup), dispatch up to
// maxCompletionsPerPoll completions timed as ioTime, feed the stalled-ring
// detector, then run due timers and tasks for ioTime*(100-ioRatio)/ioRatio
// and the tail tasks queued so far. While a runtime/trace is taken, the turn
// and its phases are trace regions (tracing.go).
func (l *Loop) turn() {
	l.stats.turns.Add(1)
	if tracing := trace.IsEnabled(); tracing || l.tr.task != nil {
		l.tr.begin(l.name, tracing)
	}
	l.Running(&whatLoop)
	if faultsEnabled && faultRebuild() {
		l.io.rebuild("injected fault")
	}
	var timeout time.Duration
	sleeping := false
	if !l.hasWork() {
		now := l.clock.Now()
		timeout = l.wheel.Delay(now)
		st := State(l.state.Load())
		if st >= StateShuttingDown {
			timeout = min(timeout, l.shutdown.waitBound(now))
		}
		if timeout > 0 {
			// Counted before the deadline is visible: a producer may
			// write the eventfd as soon as it is, and Stats must never
			// show that write without its sleep (WakeWrites ≤ Sleeps).
			l.stats.sleeps.Add(1)
			sleeping = l.waker.publish(now+int64(timeout), st)
			if !sleeping {
				l.stats.sleeps.Add(^uint64(0))
				timeout = 0
			}
		}
	}
	l.io.delivering = false
	l.drv.setHandOff(l.handOff.Load() && l.handOff.Swap(false))
	if l.tr.on {
		l.tr.wait()
	}
	res, err := l.drv.poll(timeout, maxCompletionsPerPoll, &l.io)
	if sleeping {
		l.waker.nextWakeup.Store(awake)
	}
	if l.tr.on {
		l.tr.endPhase() // wait, or io once a completion was delivered
	}
	now := l.clock.Now()
	var ioTime int64
	busySince := now // the turn's busy time starts with dispatch, else here
	if l.io.delivering {
		ioTime = max(now-l.io.deliveringSince, 0)
		l.stats.ioNanos.Add(uint64(ioTime))
		l.stats.ioTime.observe(ioTime)
		busySince = l.io.deliveringSince
	}
	if res.woken {
		l.stats.wakeups.Add(1)
	}
	l.stall.observe(timeout, res, err, now)
	if l.tr.on {
		l.tr.tasks()
	}
	end := l.runTasks(now, ioTime)
	if l.tr.on {
		l.tr.endPhase()
	}
	l.stats.turnTime.observe(end - busySince)
	l.stats.opsInFlight.Store(int64(l.io.ops.inFlight))
	if l.cfg.sharedThread {
		if sleeping {
			l.delivered = 0
		}
		if l.delivered += res.completions; l.delivered > sharedYieldAfter {
			l.delivered = 0
			l.yieldThread(now)
		}
	}
	l.maybeYield(now)
	if l.tr.on {
		l.tr.end()
	}
}

// maxRefillPasses bounds how often one task phase at ioRatio 100 moves due
// timers that did not fit in a full task queue (the rest wait for the next
// turn, after I/O).
const maxRefillPasses = 1024

// runTasks is the task phase of a turn (Netty's runAllTasks(timeout), and
// runAllTasks() at ioRatio 100), followed by the tail tasks. It returns the
// clock reading it ends with (the turn's one read after its task phase,
// which the histograms share).
func (l *Loop) runTasks(now, ioTime int64) (end int64) {
	start := now
	ran := 0
	l.moveDueTimers(now)
	ratio := int64(l.ioRatio.Load())
	switch {
	case ratio == 100 && State(l.state.Load()) < StateShuttingDown:
		// Run everything, including what tasks queue meanwhile, and timers
		// that were due when the phase began but did not fit in a full
		// queue, until nothing is left. Bounded: a periodic timer whose
		// period is shorter than its run (or a bounded queue of one task)
		// would otherwise be due again on every pass, and the turn would
		// never get back to I/O.
		for pass := 0; ; pass++ {
			ran += l.tasks.Drain(0, l.runTaskFn)
			if !l.timersLeftBehind || pass == maxRefillPasses {
				break
			}
			l.moveDueTimers(now)
		}
	case ratio == 100:
		// Shutting down: bounded by what is queued now, so the shutdown
		// timeout is checked even if producers never stop.
		ran += l.tasks.Drain(l.tasks.Len(), l.runTaskFn)
	default:
		deadline := start + ioTime*(100-ratio)/ratio
		for {
			n := l.tasks.Drain(taskCheckInterval, l.runTaskFn)
			ran += n
			if n < taskCheckInterval || l.clock.Now() >= deadline {
				break
			}
		}
	}
	ran += l.runTail()
	if l.io.parked.len() > 0 {
		l.io.parked.resubmit()
	}
	end = l.clock.Now()
	if ran > 0 {
		busy := max(end-start, 0)
		l.stats.tasks.Add(uint64(ran))
		l.stats.taskNanos.Add(uint64(busy))
		l.stats.taskTime.observe(busy)
		l.lastTaskRun = end
	}
	if n, first, second := l.tasks.BatchesTaken(); n > 0 {
		l.stats.queueDelay.observe(queueWait(start, end, n, first, second))
	}
	return end
}

// queueWait is the QueueDelay sample of a task phase that ran from start
// to end and took n batches from the task queue, the first two queued at
// first and second: the longest any of their tasks waited, as far as the
// phase's two clock readings tell. A batch queued before the phase began
// was taken at its start (unless tasks left from an earlier turn ran
// first); one queued while it ran (every batch after the first is) was
// taken before its end, an upper bound. Within each kind the earliest
// queued waited longest.
func queueWait(start, end int64, n int, first, second int64) int64 {
	wait := end - first
	if first <= start {
		wait = start - first
	}
	if n > 1 {
		wait = max(wait, end-second)
	}
	return max(wait, 0)
}

// runTail runs the tail tasks queued before it started, once each.
func (l *Loop) runTail() int {
	n := l.tail.Len()
	if n == 0 {
		return 0
	}
	return l.tail.Drain(n, l.runTailFn)
}

// runTask runs one task under recover: a panic is logged with its stack and
// counted, and the loop carries on with the next task. What it runs (a
// task, a due timer, a shutdown hook) is recorded for the blocked-loop
// detector first.
func (l *Loop) runTask(t sched.Task) {
	switch t.(type) {
	case *sched.Timer:
		l.Running(&whatTimer)
	case hookTask:
		l.Running(&whatHook)
	default:
		l.Running(&whatTask)
	}
	l.runRecorded(t)
}

// runTailTask runs one tail task as runTask does.
func (l *Loop) runTailTask(t sched.Task) {
	l.Running(&whatTailTask)
	l.runRecorded(t)
}

// runRecorded runs t under recover, its description already recorded.
func (l *Loop) runRecorded(t sched.Task) {
	if err := sched.Run(t); err != nil {
		l.stats.panics.Add(1)
		if pe, ok := err.(*sched.PanicError); ok {
			l.logger.Error("loop: task panicked", "loop", l.name, "panic", pe.Value, "stack", string(pe.Stack))
		} else {
			l.logger.Error("loop: task panicked", "loop", l.name, "err", err)
		}
	}
}

// moveDueTimers hands due timers to the task queue. Those that do not fit
// stay in the wheel, in order, for the next call, and set timersLeftBehind
// (Netty's fetchFromScheduledTaskQueue).
func (l *Loop) moveDueTimers(now int64) {
	l.timersLeftBehind = false
	l.dueNow = now
	l.wheel.Advance(now, l.moveDueTimerFn)
}

// moveDueTimer queues due timer t; false (the queue is full) stops the
// move. The push is stamped with the instant the wheel advanced to, so the
// queue reads no clock for it.
func (l *Loop) moveDueTimer(t *sched.Timer) bool {
	if l.tasks.PushAt(t, l.dueNow) != nil {
		l.timersLeftBehind = true
		return false
	}
	return true
}
