package ring

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	errEINTR = unix.EINTR
	errETIME = unix.ETIME
)

// enter calls io_uring_enter on the ring, through the registered ring index
// when RegisterRingFd succeeded.
func (r *Ring) enter(toSubmit, minComplete, flags uint32, arg unsafe.Pointer, argSz uintptr) (int, error) {
	if r.counts != nil {
		r.countEnter(flags | r.enterFlags)
	}
	return sysEnter(r.enterFd, toSubmit, minComplete, flags|r.enterFlags, arg, argSz, r.handOff)
}

// SetHandOff sets whether the enters that wait for completions give the
// calling thread's P back to the Go scheduler before they sleep, as the
// runtime does for system calls it knows to block, instead of keeping it
// until sysmon retakes it. Keeping it is cheaper when nothing else waits
// for a P; handing it off lets a goroutine made runnable just before the
// wait run at once, at the cost of a thread wakeup. Off by default. Must be
// called by the goroutine that owns the ring.
func (r *Ring) SetHandOff(on bool) { r.handOff = on }

// Submit publishes the SQEs prepared since the last Submit and tells the
// kernel about them, without waiting for completions. It returns the number
// of SQEs the kernel consumed. With SetupSQPoll it enters the kernel only
// when the poller thread sleeps (SQNeedWakeup).
//
// When the kernel holds overflowed CQEs, the same system call also flushes
// them into the CQ (EnterGetEvents with min_complete 0), so no completion
// waits for a later Peek to be noticed.
// Must be called by the goroutine that owns the ring.
func (r *Ring) Submit() (int, error) { return r.submit(0) }

// SubmitAndWait is Submit, then waits until at least n CQEs are ready
// (n = 0: do not wait). It returns the number of SQEs consumed.
//
// EINTR: a signal (the Go runtime sends SIGURG to preempt goroutines) can
// interrupt the wait. The kernel reports EINTR only when it consumed no SQE;
// either way SubmitAndWait resubmits what is still pending and waits again,
// so the caller never sees EINTR. Errors are bare errnos from
// io_uring_enter(2): EBUSY or EAGAIN mean the kernel is short of resources
// or of CQ room, and the caller should reap before retrying.
// Must be called by the goroutine that owns the ring.
func (r *Ring) SubmitAndWait(n uint32) (int, error) { return r.submit(n) }

func (r *Ring) submit(waitNr uint32) (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	submitted := 0
	for {
		pending := r.flushSQ()
		var flags uint32
		needEnter := pending > 0
		if r.flags&SetupSQPoll != 0 {
			// The poller thread consumes the SQ; enter only to wake it.
			submitted += int(pending)
			needEnter = false
			if r.sqFlags()&SQNeedWakeup != 0 {
				flags |= EnterSQWakeup
				needEnter = true
			}
			pending = 0
		}
		if waitNr > 0 || r.cqNeedsFlush() {
			flags |= EnterGetEvents
			needEnter = true
		}
		if !needEnter {
			return submitted, nil
		}
		wait := waitNr
		if wait > 0 && pending > 0 {
			// Submit without waiting first: the inline work runs in a
			// call that cannot sleep; wait only if it left too few CQEs.
			wait = 0
		}
		n, err := r.enter(pending, wait, flags, nil, 0)
		switch {
		case err == errEINTR:
			continue // nothing consumed; resubmit and wait again
		case err != nil:
			return submitted, wrapSyscall("io_uring_enter", err)
		}
		submitted += n
		if waitNr == 0 || r.CQReady() >= waitNr {
			return submitted, nil
		}
		if wait == 0 {
			continue // submitted; now wait, with nothing left to submit
		}
		if n == 0 {
			return submitted, nil
		}
		// The kernel consumed SQEs and may have hidden an interrupted wait
		// behind that count; wait once more (nothing left to submit).
	}
}

// SubmitAndWaitTimeout is SubmitAndWait bounded by d. If fewer than n CQEs
// are ready when d elapses it returns an error matching unix.ETIME. d <= 0
// submits and flushes without waiting. The timeout travels in
// IORING_ENTER_EXT_ARG.
//
// EINTR is handled as in SubmitAndWait, the wait resuming with the time
// that remains until the deadline.
// Must be called by the goroutine that owns the ring.
func (r *Ring) SubmitAndWaitTimeout(n uint32, d time.Duration) (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	if d <= 0 || n == 0 {
		submitted, err := r.submit(0)
		if err == nil && r.CQReady() < n {
			err = errETIME
		}
		return submitted, err
	}
	submitted := 0
	if pending := r.flushSQ(); pending > 0 || r.cqNeedsFlush() {
		// Submit and run deferred task work without waiting first: that
		// inline work then runs in a call that cannot sleep, and the
		// sleeping call below is made only if it left too few CQEs.
		got, err := r.enter(pending, 0, EnterGetEvents, nil, 0)
		submitted += got
		if err != nil && err != errEINTR {
			return submitted, wrapSyscall("io_uring_enter", err)
		}
		if r.CQReady() >= n {
			return submitted, nil
		}
	}
	deadline := time.Now().Add(d)
	for {
		r.waitTs = durationTimespec(d)
		r.waitArg = GetEventsArg{Ts: uint64(uintptr(unsafe.Pointer(&r.waitTs)))}
		pending := r.flushSQ()
		got, err := r.enter(pending, n, EnterGetEvents|EnterExtArg,
			unsafe.Pointer(&r.waitArg), unsafe.Sizeof(r.waitArg))
		submitted += got
		if r.CQReady() >= n {
			return submitted, nil
		}
		switch {
		case err == errETIME:
			return submitted, errETIME
		case err != nil && err != errEINTR:
			return submitted, wrapSyscall("io_uring_enter", err)
		}
		// EINTR, or the kernel consumed SQEs and hid the wait's result:
		// wait again for what remains of d.
		if d = time.Until(deadline); d <= 0 {
			return submitted, errETIME
		}
	}
}

// WaitCQETimeout submits pending SQEs and returns the oldest CQE, waiting at
// most d for one. When d elapses first the error matches unix.ETIME.
// Release the CQE with CQESeen.
// Must be called by the goroutine that owns the ring.
func (r *Ring) WaitCQETimeout(d time.Duration) (*CQE, error) {
	if _, err := r.SubmitAndWaitTimeout(1, d); err != nil {
		return nil, err
	}
	c, ok := r.PeekCQE()
	if !ok {
		return nil, errETIME
	}
	return c, nil
}

// durationTimespec converts d (> 0) to a relative kernel timespec.
func durationTimespec(d time.Duration) Timespec {
	return Timespec{Sec: int64(d / time.Second), Nsec: int64(d % time.Second)}
}
