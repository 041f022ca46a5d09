//go:build linux

package loop

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/ring"
)

// Rebuild: the stalled-ring recovery (docs/loop.md, "Stall recovery";
// docs/op-lifecycle.md, "Ring rebuild"). A new ring with its own buffer
// ring is made first (if that fails, nothing has changed). The old ring's
// SQ is flushed and everything on it canceled; the new ring becomes
// current; the old one is reaped until every op live at the cancel has its
// final completion, or uringRebuildTimeout passes. A real result is
// delivered once, in CQ order. The rebuild's own -ECANCELED of an op the
// loop was not canceling is not delivered: the op is resubmitted on the
// new ring with the same record, in slot order (a CONNECT continues as a
// POLL_ADD for POLLOUT: a second CONNECT fails with EALREADY). An op with
// no final completion by the deadline is given up, never resubmitted (that
// could duplicate or lose bytes): its memory is quarantined (quarantine.go,
// with the old buffer ring if a provided receive was given up) and its
// final completion is -ECANCELED with Completion.Quarantined.

// rebuildLostRes is the result delivered for an op whose outcome the
// rebuild could not learn by its deadline (see above).
const rebuildLostRes = -int32(unix.ECANCELED)

// migration is rebuild's view of one live op.
type migration struct {
	o        *op
	final    bool // its final completion was seen on the old ring
	resubmit bool // ...and it was the rebuild's -ECANCELED: move it
}

// uringRebuild is one rebuild of a uring driver's ring: the ops live when
// it began, by user_data and in slot order, and the old ring it reaps until
// each has its final completion.
type uringRebuild struct {
	d          *uringDriver
	sink       completionSink
	old        *ring.Ring
	oldBufRing *ring.BufRing
	oldDgram   *ring.BufRing // the old ring's datagram buffers, if it had them
	live       map[uint64]*migration
	order      []*migration
	waiting    int  // live ops whose final completion the old ring has not posted
	wakeOut    bool // the old ring's eventfd read has not completed
}

// rebuild implements driver; see the comment above.
func (d *uringDriver) rebuild(t *opTable, sink completionSink) (int, error) {
	if d.closed {
		return 0, errDriverClosed
	}
	if !d.started {
		return 0, fmt.Errorf("loop: uring backend: rebuild before start")
	}
	if faultsEnabled {
		d.rebuildTimeout = d.faults.rebuildTimeout(d.rebuildTimeout)
	}
	rb := &uringRebuild{d: d, sink: sink, old: d.r, oldBufRing: d.bufRing, oldDgram: d.dgramRing}
	nr, err := d.newRing(false)
	if err != nil {
		return 0, fmt.Errorf("loop: uring backend: rebuild: new ring: %w", err)
	}
	// The new ring gets its own provided-buffer ring; the old one stays
	// for the completions still to come from the old ring. A new ring
	// that cannot have one when the old one had it is refused, before
	// anything moves: the receives armed on the old ring could not be
	// resubmitted.
	newBR, err := d.prepareRing(nr)
	var newDR *ring.BufRing
	if err == nil && d.dgramRing != nil {
		newDR, err = d.newDgramRing(nr)
	}
	if err != nil {
		nr.Close() // and the buffer rings registered with it
		return 0, fmt.Errorf("loop: uring backend: rebuild: %w", err)
	}

	// Every live op, by user_data; ordered by slot for resubmission.
	rb.live = make(map[uint64]*migration)
	t.each(func(o *op) {
		if o.state == opInFlight || o.state == opCanceling {
			m := &migration{o: o}
			rb.live[o.userData()] = m
			rb.order = append(rb.order, m)
		}
	})
	rb.waiting = len(rb.live)
	rb.wakeOut = d.wakeArmed

	// Flush what submit handed over, then cancel everything.
	if _, err := rb.old.Submit(); err != nil {
		d.cfg.logger.Warn("io_uring rebuild: flushing the old ring failed", "loop", d.cfg.name, "err", err)
	}
	if !d.rebuildSkipCancel {
		rb.cancelOld()
	}

	// Switch to the new ring now: completions delivered while the old
	// ring is reaped run callbacks, and whatever those submit (a re-armed
	// receive, the next send of a stream) must go to the new ring, not to
	// the one about to be closed. From here on the rebuild has happened:
	// problems are logged, not returned, since the loop reads an error as
	// "the old ring is still in use".
	d.r, d.bufRing, d.dgramRing = nr, newBR, newDR
	d.faults.dropHeld() // held back from the old buffer ring, which goes
	d.featureSet.SetupFlags = d.ringFlags
	d.featureSet.RingFeatures = nr.Features()
	d.lastOverflow = nr.Overflow()
	d.publishFeatures()
	d.wakeArmed = false
	if err := d.armWake(); err != nil {
		// The next poll tries again.
		d.cfg.logger.Warn("io_uring rebuild: arming the eventfd read", "loop", d.cfg.name, "err", err)
	}

	rb.reap()
	if d.rebuildReaped != nil {
		d.rebuildReaped()
	}
	migrated := rb.move()
	// Push the resubmissions and the eventfd read now, so the new ring
	// owns every op before the loop's next turn (a failure here is
	// retried by the next poll's enter).
	if _, err := nr.Submit(); err != nil {
		d.cfg.logger.Warn("io_uring rebuild: submitting to the new ring", "loop", d.cfg.name, "err", err)
	}
	return migrated, nil
}

// reap reaps the old ring until every live op has its final completion, or
// the rebuild's deadline passes.
func (rb *uringRebuild) reap() {
	d, old := rb.d, rb.old
	deadline := time.Now().Add(d.rebuildTimeout)
	for rb.waiting > 0 || rb.wakeOut {
		n := old.PeekBatch(d.cqeBatch[:])
		if n == 0 {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			_, err := old.SubmitAndWaitTimeout(1, min(left, 100*time.Millisecond))
			if err != nil && err != errETIME && err != errEINTR {
				d.cfg.logger.Warn("io_uring rebuild: waiting on the old ring failed", "loop", d.cfg.name, "err", err)
				time.Sleep(min(time.Until(deadline), time.Millisecond))
			}
			continue
		}
		old.CQAdvance(uint32(n))
		for i := range n {
			c := &d.cqeBatch[i]
			tag := opTag(c.UserData >> (slotBits + genBits))
			if tag == tagInternal {
				if internalID(uint32(c.UserData)) == internalWake && rb.wakeOut {
					rb.wakeOut = false
					d.pendingWoken = c.Res >= 0 // else canceled
				}
				continue
			}
			if faultsEnabled {
				d.faults.result(c, d.bufRing)
				if d.faults.hide(c) {
					continue
				}
			}
			if rb.reapOld(c) {
				rb.waiting--
			}
		}
	}
}

// move moves the ops over to the new ring, fails those that cannot be
// moved, gives up those the old ring never finished, closes the old ring,
// and returns how many ops moved. An op canceled since its move was
// decided is not re-armed: its cancel went to the new ring before it, and
// found nothing there.
func (rb *uringRebuild) move() int {
	d, sink := rb.d, rb.sink
	migrated := 0
	var lost, unmoved []*migration
	for _, m := range rb.order {
		switch {
		case m.resubmit && m.o.state == opCanceling:
			// A callback run during the reap canceled it after its
			// move was decided; its cancel went to the new ring and
			// found nothing. The cancel wins: deliver it.
			ud := m.o.userData()
			delete(d.connWait, ud)
			sink.complete(ud, -int32(unix.ECANCELED), 0, nil)
		case m.resubmit:
			if err := rb.resubmit(m.o); err != nil {
				// Nothing happened to this op (the kernel's final
				// word was its cancel), but it cannot be moved: it
				// fails, with nothing to quarantine.
				d.cfg.logger.Warn("io_uring rebuild: resubmitting an op", "loop", d.cfg.name,
					"op", m.o.tag.String(), "err", err)
				unmoved = append(unmoved, m)
				continue
			}
			migrated++
		case !m.final:
			lost = append(lost, m)
		}
	}
	for _, m := range unmoved {
		ud := m.o.userData()
		delete(d.connWait, ud)
		sink.complete(ud, rebuildLostRes, 0, nil)
	}
	// A receive given up may still be writing into the old provided
	// buffers it selects from: their mapping stays for the life of the
	// process.
	var brBytes uint64
	quarantined := map[*ring.BufRing]bool{}
	for _, m := range lost {
		if br := rb.oldRings().forTag(m.o.tag); m.o.tag.providedRecv() && br != nil && !quarantined[br] {
			quarantined[br] = true
			brBytes += uint64(br.Quarantine())
		}
	}
	// Close the old ring before failing the unknown ops: the kernel
	// cancels what is left as it tears the ring down.
	if countSubmissions {
		d.closedSubmissions.Add(rb.old.Submissions())
	}
	if err := rb.old.Close(); err != nil {
		d.cfg.logger.Warn("io_uring rebuild: closing the old ring", "loop", d.cfg.name, "err", err)
	}
	for _, m := range lost {
		ud := m.o.userData()
		delete(d.connWait, ud)
		var extra uint64
		if m.o.tag.providedRecv() {
			extra, brBytes = brBytes, 0
		}
		sink.abandon(ud, rebuildLostRes, 0, extra)
	}
	if len(lost) > 0 {
		d.cfg.logger.Error("io_uring rebuild: ops given up without a final completion; their memory is quarantined",
			"loop", d.cfg.name, "ops", len(lost))
	}
	return migrated
}

// oldRings are the old ring's buffer rings.
func (rb *uringRebuild) oldRings() bufRings { return bufRings{rb.oldBufRing, rb.oldDgram} }

// cancelOld cancels every op of the old ring, the eventfd read included,
// with one ASYNC_CANCEL_ANY.
func (rb *uringRebuild) cancelOld() {
	d, old := rb.d, rb.old
	sqe, err := getSQE(old)
	if err != nil {
		d.cfg.logger.Warn("io_uring rebuild: no SQE for a cancel", "loop", d.cfg.name, "err", err)
		return
	}
	sqe.PrepCancelAll()
	sqe.UserData = internalUserData(internalCancel)
	if _, err := old.Submit(); err != nil {
		d.cfg.logger.Warn("io_uring rebuild: submitting cancels failed", "loop", d.cfg.name, "err", err)
	}
}

// reapOld handles one completion of a table op on the old ring and reports
// whether it was the op's final one.
func (rb *uringRebuild) reapOld(c *ring.CQE) bool {
	d, sink := rb.d, rb.sink
	m := rb.live[c.UserData]
	if m == nil || m.final {
		// Not a live op: stale; the sink counts it.
		d.deliver(c, rb.oldRings(), sink)
		return false
	}
	more := c.Flags&ring.CQEFMore != 0
	ours := m.o.state == opInFlight // not canceled by the loop itself
	canceled := c.Res == -int32(unix.ECANCELED)
	if more {
		d.deliver(c, rb.oldRings(), sink) // a multishot result
		return false
	}
	m.final = true
	if ours && canceled {
		m.resubmit = true
		return true
	}
	d.deliver(c, rb.oldRings(), sink)
	return true
}

// resubmit puts a migrated op on the (new) current ring.
func (rb *uringRebuild) resubmit(o *op) error {
	d := rb.d
	sqe, err := d.getSQE()
	if err != nil {
		return err
	}
	ud := o.userData()
	switch o.tag {
	case tagConnect:
		sqe.PrepPollAdd(int(o.fd), unix.POLLOUT)
		sqe.UserData = ud
		if d.connWait == nil {
			d.connWait = make(map[uint64]int32)
		}
		d.connWait[ud] = o.fd
		return nil
	}
	d.prep(sqe, o)
	return nil
}
