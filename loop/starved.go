package loop

import "golang.org/x/sys/unix"

// Provided-buffer receives starved of buffers (docs/op-lifecycle.md,
// "States", Parked). When many sockets hold data, the first receives run
// the buffer ring empty and the others end with -ENOBUFS; re-arming them all
// at once only repeats that, turn after turn. So such a receive is parked
// instead of delivered (same OpID, out of the kernel), and each turn's end
// resubmits the oldest, one per starvedPerBuffers buffers. One resubmitted
// that finds the buffers gone again (the others took them first) keeps its
// place at the front, ahead of the receives that just got bytes: otherwise
// the same receive of each resubmitted batch would win every time, and the
// others never. With bundles,
// while any is parked the loop also rotates them, so that a multishot
// receive still armed cannot take every recycled buffer: resubmitted ones
// complete once, new ones queue behind, and an armed multishot one is
// canceled after its next completion and parked (without bundles a rotated
// single shot would take one buffer, too little to be worth it). Where the
// kernel bounds what a multishot receive takes, a rotated one is such a
// receive limited to one bundle (starvedPerBuffers buffers), so a turn's
// resubmitted receives share the buffers; a single shot with bundles would
// go on taking free buffers while its socket holds bytes, leaving the
// others none.

// A parked receive is no longer in the kernel, so:
//   - Cancel takes it out at the end of the turn, delivering -ECANCELED as
//     its final completion;
//   - a ring rebuild leaves it alone (it goes to the new ring when its turn
//     comes);
//   - a terminating loop delivers -ECANCELED to every parked receive before
//     it cancels the ops in the kernel.
//
// Its Completer never sees that -ENOBUFS; the bytes wait in the socket
// meanwhile.

// starvedPerBuffers is how many provided buffers one resubmitted receive
// is budgeted to take.
const starvedPerBuffers = 16

// parkedQueue is the loop's receives waiting for buffers, oldest first,
// and what parks, rotates and resubmits them. Loop goroutine only.
type parkedQueue struct {
	io       *IO
	again    opFIFO // resubmitted, then parked again before any bytes: first in line
	ops      opFIFO // the others
	canceled int    // entries canceled while parked (opParkedCanceled)
	budget   int    // receives resubmitted per turn: one per starvedPerBuffers buffers, at least one
}

func (q *parkedQueue) len() int { return q.again.len() + q.ops.len() }

// each calls f for every parked op, in the order they will be resubmitted.
func (q *parkedQueue) each(f func(o *op)) {
	for _, o := range q.again.ops[q.again.head:] {
		f(o)
	}
	for _, o := range q.ops.ops[q.ops.head:] {
		f(o)
	}
}

// park keeps o, a provided-buffer receive whose final completion was
// -ENOBUFS, for a later resubmission, and reports whether it did: not
// while the op is being canceled.
func (q *parkedQueue) park(o *op, res int32) bool {
	if !o.tag.providedRecv() {
		return false
	}
	if o.marks&markYield != 0 {
		// The loop's own cancel (yield) ended it: it goes to the back
		// of the queue as if its buffers had run out. A final completion
		// with bytes (the receive ended before the cancel reached it) is
		// delivered as it is.
		o.marks &^= markYield
		if res == -int32(unix.ECANCELED) || res == -int32(unix.ENOBUFS) {
			o.state, res = opInFlight, -int32(unix.ENOBUFS)
		}
	}
	if res != -int32(unix.ENOBUFS) || o.state != opInFlight {
		return false
	}
	if State(q.io.l.state.Load()) >= StateShutdown {
		return false // the drain completes it (noBufsResult)
	}
	if o.marks&markRetried != 0 {
		// Resubmitted, it found no buffer: it keeps its place.
		o.marks &^= markRetried
		o.state = opParked
		q.again.push(o)
		q.io.l.stats.parked.Add(1)
		return true
	}
	q.push(o)
	return true
}

// yield cancels o, a multishot receive still armed while others wait
// for buffers, so that its final completion parks it behind them (park).
// A receive armed before the buffers ran short would otherwise keep taking
// every buffer the loop recycles. A cancel the backend refuses leaves it
// armed.
func (q *parkedQueue) yield(o *op) {
	if q.io.drv.cancel(o) != nil {
		return
	}
	o.state = opCanceling
	o.marks |= markYield
}

// push puts o at the back of the queue.
func (q *parkedQueue) push(o *op) {
	o.state = opParked
	q.ops.push(o)
	q.io.l.stats.parked.Add(1)
}

// rotating reports whether the loop rotates its provided-buffer receives
// while some are parked: only with bundles (a rotated single shot then
// takes up to 16 buffers), not while the loop terminates (a receive armed
// then goes to the kernel, where the drain cancels it).
func (q *parkedQueue) rotating() bool {
	return State(q.io.l.state.Load()) < StateShutdown && q.io.drv.features().RecvBundle
}

// cancel marks a parked op canceled; the turn's end completes it.
func (q *parkedQueue) cancel(o *op) {
	o.state = opParkedCanceled
	q.canceled++
}

// resubmit runs at the end of each turn: canceled receives get their
// final completion, then up to the budget of the others are resubmitted,
// those parked again after a resubmission first.
// Completers run meanwhile (those final completions, a resubmission the
// backend refuses) and may cancel receives still queued, so each op's state
// is read as it is taken: one canceled by then ends as canceled instead.
func (q *parkedQueue) resubmit() {
	if q.canceled > 0 {
		q.endMatching(func(o *op) bool { return o.state == opParkedCanceled })
	}
	single := q.rotating()
	for n := q.budget; n > 0 && q.len() > 0; {
		var o *op
		if q.again.len() > 0 {
			o = q.again.pop()
		} else {
			o = q.ops.pop()
		}
		if o.state == opParkedCanceled {
			q.canceled = max(q.canceled-1, 0)
			q.end(o)
			continue
		}
		n--
		o.state = opQueued
		o.marks |= markRetried
		if single && o.tag == tagRecvBuf {
			if o.multishot {
				// Not one armed with RecvProvidedOnce: it stays a plain
				// single shot (over AF_UNIX a multishot receive can miss
				// the peer's shutdown).
				o.marks |= markOneBundle
			}
			o.multishot = false // one completion, then the back of the queue
		}
		if err := q.io.drv.submit(o); err != nil {
			// The backend takes no more ops (it is closing): the
			// receive ends here, as canceled.
			q.end(o)
			continue
		}
		q.io.l.stats.submitted.Add(1)
	}
	q.again.compact()
	q.ops.compact()
}

// end gives o, taken off the queue, its final completion: -ECANCELED.
func (q *parkedQueue) end(o *op) {
	c := o.completer
	q.io.ops.release(o)
	q.io.l.stats.completions.Add(1)
	q.io.deliver(c, -int32(unix.ECANCELED), 0, nil)
}

// noBufsResult is the final result a provided-buffer receive reports for
// -ENOBUFS it was not parked for: -ECANCELED (the op was being canceled and
// consumed nothing, or the loop is terminating), so that its Completer
// never sees -ENOBUFS.
func noBufsResult(o *op, res int32) int32 {
	if o.tag.providedRecv() && res == -int32(unix.ENOBUFS) {
		return -int32(unix.ECANCELED)
	}
	return res
}

// endMatching delivers -ECANCELED as the final completion of every
// parked op that match selects (all of them when match is nil).
func (q *parkedQueue) endMatching(match func(*op) bool) {
	done := q.again.remove(match, nil)
	done = q.ops.remove(match, done)
	if match == nil || q.canceled <= len(done) {
		q.canceled = 0
	} else {
		q.canceled -= len(done)
	}
	for _, o := range done {
		q.end(o)
	}
}

// opFIFO is a queue of ops, oldest first.
type opFIFO struct {
	ops  []*op
	head int
}

func (f *opFIFO) len() int { return len(f.ops) - f.head }

func (f *opFIFO) push(o *op) { f.ops = append(f.ops, o) }

// pop takes the oldest op; f must not be empty.
func (f *opFIFO) pop() *op {
	o := f.ops[f.head]
	f.ops[f.head] = nil
	f.head++
	return o
}

// remove takes the ops that match selects (all of them when match is nil)
// out of f, keeping the others' order, and returns them appended to done.
func (f *opFIFO) remove(match func(*op) bool, done []*op) []*op {
	k := f.head
	for _, o := range f.ops[f.head:] {
		if match == nil || match(o) {
			done = append(done, o)
			continue
		}
		f.ops[k] = o
		k++
	}
	clear(f.ops[k:])
	f.ops = f.ops[:k]
	return done
}

// compact drops the taken entries from the front.
func (f *opFIFO) compact() {
	switch {
	case f.head == len(f.ops):
		clear(f.ops)
		f.ops, f.head = f.ops[:0], 0
		if cap(f.ops) > 1024 {
			f.ops = nil // give the memory back after a burst
		}
	case f.head > len(f.ops)/2:
		k := copy(f.ops, f.ops[f.head:])
		clear(f.ops[k:])
		f.ops, f.head = f.ops[:k], 0
	}
}
