//go:build linux

package loop

import (
	"time"

	"golang.org/x/sys/unix"
)

// waitTimer is the epoll driver's timerfd: epoll_wait counts its timeout in
// milliseconds, so a wait with a sub-millisecond part arms the timerfd for
// its exact length (CLOCK_MONOTONIC), and epoll_wait's own timeout, rounded
// up, is only a backstop. The timerfd is in the epoll set.
type waitTimer struct {
	fd    int
	armed bool            // armed and not fired
	spec  unix.ItimerSpec // timerfd_settime argument, reused
}

// set arms the timerfd for a wait of w with a sub-millisecond part, and
// disarms a timer left from an earlier wait (cut short by an event) before
// any other blocking wait, which the stale expiry would end early. During a
// non-blocking wait a stale expiry is harmless and just drained.
func (t *waitTimer) set(w time.Duration) {
	switch {
	case w > 0 && w%time.Millisecond != 0:
		t.spec.Value = unix.NsecToTimespec(int64(w))
		t.armed = unix.TimerfdSettime(t.fd, 0, &t.spec, nil) == nil
	case w != 0 && t.armed:
		t.spec.Value = unix.Timespec{}
		unix.TimerfdSettime(t.fd, 0, &t.spec, nil)
		t.armed = false
	}
}

// drain consumes the timerfd's expiry count, read into buf.
func (t *waitTimer) drain(buf []byte) {
	t.armed = false
	readCounter(t.fd, buf)
}
