package loop

import (
	"context"
	"runtime/trace"
)

// Execution-trace regions (docs/loop.md, "Execution traces"). While a
// runtime/trace is being taken, each turn of a loop is a region named
// "ringloop.turn", with sub-regions "wait", "io" and "tasks", inside a
// trace task named after the loop, so go tool trace shows where each turn's
// time went. While no trace is taken a turn pays one trace.IsEnabled call
// (and tests of the bool it keeps).
//
// Where "wait" ends and "io" begins: both are inside the backend's poll,
// and the boundary is the first completion the poll delivers, the instant
// the loop's I/O time starts (IO.deliveringSince), so that "io" is what
// Stats.IOTime measures. On io_uring, "wait" is the submission and the wait
// (io_uring_enter) and "io" the reaping of the completion queue, every
// Completer included. On epoll the poll first delivers the results already
// queued (ops that finished or were canceled since the previous poll, and
// what it had no room for), then waits (epoll_wait) and runs the system
// calls of the ready ops, delivering each result as it comes: "wait" also
// covers the system call behind the first completion, and when results
// were queued, "io" begins before the (then non-blocking) wait. A poll
// that delivers nothing is all "wait". "tasks" is the task phase: due
// timers, tasks and tail tasks.

// Region names.
const (
	traceTurn  = "ringloop.turn"
	traceWait  = "wait"
	traceIO    = "io"
	traceTasks = "tasks"
)

// loopTrace is a loop's runtime/trace state: its task in the current trace
// and the regions of the turn being traced. Regions start and end on the
// loop goroutine, as runtime/trace requires. Loop goroutine only.
type loopTrace struct {
	on      bool            // tracing was on when the current turn began; the turn's regions are open
	waiting bool            // the wait region is open: the poll has delivered no completion yet
	ctx     context.Context // the context of task
	task    *trace.Task     // the loop's task in the current trace; nil before the first trace and between traces
	turn    *trace.Region   // the turn's region
	phase   *trace.Region   // the turn's open sub-region (wait, io or tasks), or nil
}

// begin starts a turn's tracing, given whether tracing is on (the turn's
// one trace.IsEnabled). The task is made the first time a turn sees
// tracing on, and made again after a turn saw it off: a task begun in an
// earlier trace is unknown to a new one. A trace stopped and another
// started while the loop waited, with no turn in between, keeps the
// earlier task (runtime/trace tells no trace from the next); the new
// trace then shows the loop's regions in a task it has no name for.
func (t *loopTrace) begin(name string, tracing bool) {
	if !tracing {
		t.endTask()
		return
	}
	if t.task == nil {
		t.ctx, t.task = trace.NewTask(context.Background(), name)
	}
	t.on = true
	t.turn = trace.StartRegion(t.ctx, traceTurn)
}

// wait opens the wait sub-region, before the poll.
func (t *loopTrace) wait() {
	t.phase = trace.StartRegion(t.ctx, traceWait)
	t.waiting = true
}

// dispatching ends the wait sub-region and opens io: the poll delivers its
// first completion. Called only while waiting.
func (t *loopTrace) dispatching() {
	t.phase.End()
	t.phase = trace.StartRegion(t.ctx, traceIO)
	t.waiting = false
}

// tasks opens the tasks sub-region.
func (t *loopTrace) tasks() { t.phase = trace.StartRegion(t.ctx, traceTasks) }

// endPhase ends the open sub-region, if any.
func (t *loopTrace) endPhase() {
	if t.phase != nil {
		t.phase.End()
		t.phase = nil
	}
	t.waiting = false
}

// end ends the turn's regions, if they are open: at the end of a traced
// turn, and after a turn that did not reach its end (a panic, a Goexit).
func (t *loopTrace) end() {
	if !t.on {
		return
	}
	t.endPhase()
	t.turn.End()
	t.turn = nil
	t.on = false
}

// endTask ends the loop's task, if it has one: when a turn sees tracing
// off, and when the loop terminates.
func (t *loopTrace) endTask() {
	if t.task != nil {
		t.task.End()
		t.task, t.ctx = nil, nil
	}
}
