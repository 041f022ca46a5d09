package loop

import "golang.org/x/sys/unix"

// Provided-buffer receives starved of buffers.
//
// A multishot receive takes provided buffers for as long as its socket has
// data, so when many sockets each hold tens of KiB unread (bulk transfers,
// deep pipelines) the first few receives the kernel runs empty the loop's
// buffer ring and every other armed receive ends with -ENOBUFS. Re-arming
// all of those at once only repeats it: each re-armed receive finds data,
// the first few take the buffers again and the rest fail again, one SQE
// and one CQE each, turn after turn. Measured with one loop and its
// default 256 buffers at 1,024 connections × 64 KiB in flight: about a
// million ENOBUFS completions a second, three SQEs per 4 KiB echoed, and
// 40 % of the server's CPU in io_uring bookkeeping.
//
// So the loop parks a RecvProvided whose final completion is -ENOBUFS
// instead of delivering it: the op stays live under the same OpID, and at
// the end of each turn (the buffers the turn's completions used are back
// in the ring by then) the loop resubmits the oldest parked receives, as
// many as the ring can serve: one per starvedPerBuffers buffers, at least
// one. Nothing is lost meanwhile: the bytes stay in the socket, and TCP's
// window holds the sender back. Its Completer never sees that -ENOBUFS.
//
// Parking alone is not fair. A multishot receive that is still armed
// keeps taking the buffers the loop recycles, completion after completion,
// while the parked ones share the few resubmissions of each turn: at 1,024
// connections the unluckiest waited many turns, and the p99 latency was
// 2–3× that of a loop that rotates. So while any receive is parked the
// loop rotates them: a receive it
// resubmits from the queue runs as a single shot, so it completes once
// (one buffer, or one bundle) and its Completer re-arms it; and a receive
// armed while the queue is not empty joins the back of the queue instead
// of going to the kernel; and a multishot receive still armed from before
// the buffers ran short (the kernel retries it as soon as the loop
// recycles buffers, so it would take them all) is canceled after its next
// completion and parked behind the others once the cancel ends it. Each
// connection with bytes waiting then gets one completion's worth per
// round, in arrival order. Once the queue is empty, receives are armed
// multishot as before. Rotation needs bundles: a single shot without them
// takes one buffer, and at 1,024 connections rotating one buffer at a
// time moved a quarter of the bytes.
//
// A parked receive is no longer in the kernel, so:
//   - Cancel takes it out at the end of the turn, delivering -ECANCELED as
//     its final completion;
//   - a ring rebuild leaves it alone (it goes to the new ring when its turn
//     comes);
//   - a terminating loop delivers -ECANCELED to every parked receive before
//     it cancels the ops in the kernel.

// starvedPerBuffers is how many provided buffers one resubmitted receive
// is budgeted to take.
const starvedPerBuffers = 16

// parkedQueue is the loop's receives waiting for buffers, oldest first.
// Loop goroutine only.
type parkedQueue struct {
	ops      []*op
	head     int
	canceled int // entries canceled while parked (opParkedCanceled)
}

func (q *parkedQueue) len() int { return len(q.ops) - q.head }

// park keeps o, a provided-buffer receive whose final completion was
// -ENOBUFS, for a later resubmission, and reports whether it did: not
// while the op is being canceled, nor where the backend has no buffers to
// wait for.
func (l *Loop) park(o *op, res int32) bool {
	if !o.tag.providedRecv() {
		return false
	}
	if o.marks&markYield != 0 {
		// The loop's own cancel (yieldRecv) ended it: it goes to the back
		// of the queue as if its buffers had run out. A final completion
		// with bytes (the receive ended before the cancel reached it) is
		// delivered as it is.
		o.marks &^= markYield
		if res == -int32(unix.ECANCELED) || res == -int32(unix.ENOBUFS) {
			o.state, res = opInFlight, -int32(unix.ENOBUFS)
		}
	}
	if res != -int32(unix.ENOBUFS) || o.state != opInFlight || l.parkBudget == 0 {
		return false
	}
	if State(l.state.Load()) >= StateShutdown {
		return false // the drain completes it (noBufsResult)
	}
	l.queueParked(o)
	return true
}

// yieldRecv cancels o, a multishot receive still armed while others wait
// for buffers, so that its final completion parks it behind them (park).
// A receive armed before the buffers ran short would otherwise keep taking
// every buffer the loop recycles. A cancel the backend refuses leaves it
// armed.
func (l *Loop) yieldRecv(o *op) {
	if l.drv.cancel(o) != nil {
		return
	}
	o.state = opCanceling
	o.marks |= markYield
}

// queueParked puts o at the back of the parked queue.
func (l *Loop) queueParked(o *op) {
	o.state = opParked
	l.parked.ops = append(l.parked.ops, o)
	l.stats.parked.Add(1)
}

// rotating reports whether the loop rotates its provided-buffer receives
// while some are parked: only with bundles, where a
// rotated single shot takes up to 16 buffers (without them each would take
// one, and at 1,024 connections × 64 KiB in flight the loop moved a
// quarter of the bytes it moves without rotating); not where nothing
// parks, nor while the loop terminates (a receive armed then
// goes to the kernel, where the drain cancels it).
func (l *Loop) rotating() bool {
	if l.parkBudget == 0 || State(l.state.Load()) >= StateShutdown {
		return false
	}
	f := l.drv.features()
	return f.RecvBundle
}

// cancelParked marks a parked op canceled; the turn's end completes it.
func (l *Loop) cancelParked(o *op) {
	o.state = opParkedCanceled
	l.parked.canceled++
}

// resubmitParked runs at the end of each turn: canceled receives get their
// final completion, then up to the budget of the others are resubmitted.
// Completers run meanwhile (those final completions, a resubmission the
// backend refuses) and may cancel receives still queued, so each op's state
// is read as it is taken: one canceled by then ends as canceled instead.
func (l *Loop) resubmitParked() {
	q := &l.parked
	if q.canceled > 0 {
		l.completeParked(func(o *op) bool { return o.state == opParkedCanceled })
	}
	single := l.rotating()
	for n := l.parkBudget; n > 0 && q.head < len(q.ops); {
		o := q.ops[q.head]
		q.ops[q.head] = nil
		q.head++
		if o.state == opParkedCanceled {
			q.canceled = max(q.canceled-1, 0)
			l.endParked(o)
			continue
		}
		n--
		o.state = opQueued
		if single && o.tag == tagRecvBuf {
			o.multishot = false // one completion, then the back of the queue
		}
		if err := l.drv.submit(o); err != nil {
			// The backend takes no more ops (it is closing): the
			// receive ends here, as canceled.
			l.endParked(o)
			continue
		}
		l.stats.submitted.Add(1)
	}
	q.compact()
}

// endParked gives o, taken off the parked queue, its final completion:
// -ECANCELED.
func (l *Loop) endParked(o *op) {
	c := o.c
	l.ops.release(o)
	l.stats.completions.Add(1)
	l.deliver(c, -int32(unix.ECANCELED), 0, nil)
}

// noBufsResult is the final result a provided-buffer receive reports for
// -ENOBUFS where the loop parks such receives: -ECANCELED when the op was
// being canceled (it consumed nothing, as a canceled one) or the loop is
// terminating, so that its Completer never sees -ENOBUFS.
func (l *Loop) noBufsResult(o *op, res int32) int32 {
	if o.tag.providedRecv() && res == -int32(unix.ENOBUFS) && l.parkBudget > 0 {
		return -int32(unix.ECANCELED)
	}
	return res
}

// completeParked delivers -ECANCELED as the final completion of every
// parked op that match selects (all of them when match is nil).
func (l *Loop) completeParked(match func(*op) bool) {
	q := &l.parked
	var done []*op
	k := q.head
	for _, o := range q.ops[q.head:] {
		if match == nil || match(o) {
			done = append(done, o)
			continue
		}
		q.ops[k] = o
		k++
	}
	clear(q.ops[k:])
	q.ops = q.ops[:k]
	if match == nil || q.canceled <= len(done) {
		q.canceled = 0
	} else {
		q.canceled -= len(done)
	}
	for _, o := range done {
		l.endParked(o)
	}
}

// compact drops the taken entries from the front.
func (q *parkedQueue) compact() {
	switch {
	case q.head == len(q.ops):
		clear(q.ops)
		q.ops, q.head = q.ops[:0], 0
		if cap(q.ops) > 1024 {
			q.ops = nil // give the memory back after a burst
		}
	case q.head > len(q.ops)/2:
		k := copy(q.ops, q.ops[q.head:])
		clear(q.ops[k:])
		q.ops, q.head = q.ops[:k], 0
	}
}
