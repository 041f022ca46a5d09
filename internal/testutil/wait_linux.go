package testutil

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// waitSyscalls are the system calls a loop thread waits for events in.
var waitSyscalls = map[int]bool{
	unix.SYS_IO_URING_ENTER: true,
	unix.SYS_EPOLL_PWAIT:    true,
	unix.SYS_EPOLL_PWAIT2:   true,
}

// WaitBlocked waits until thread tid of this process sleeps in an io_uring
// or epoll wait, as /proc/self/task/<tid>/syscall shows, and fails tb if
// it does not within d. Once it returns, what the thread submitted before
// that wait is in the kernel, and a wakeup sent now ends a wait that has
// begun.
func WaitBlocked(tb testing.TB, tid int, d time.Duration) {
	tb.Helper()
	last := ""
	ok := Eventually(d, func() bool {
		nr, line := sleepingIn(tid)
		last = line
		return waitSyscalls[nr]
	})
	if !ok {
		tb.Fatalf("thread %d not asleep in an io_uring or epoll wait within %v (last seen: %q)", tid, d, last)
	}
}

// Blocked reports whether thread tid of this process sleeps in an io_uring
// or epoll wait now.
func Blocked(tid int) bool {
	nr, _ := sleepingIn(tid)
	return waitSyscalls[nr]
}

// Sleeps returns how many times thread tid of this process has slept
// (its voluntary context switches), or -1 if the kernel does not say. A
// thread that Blocked reports asleep, and that slept more times than when
// it was last seen so, has woken and gone back to sleep since: a thread
// still asleep in a system call it was woken from looks the same to
// Blocked.
func Sleeps(tid int) int {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// sleepingIn returns the number of the system call thread tid sleeps in
// (-1 if it runs or sleeps outside one), with what the kernel said.
func sleepingIn(tid int) (int, string) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return -1, err.Error()
	}
	line := strings.TrimSpace(string(b))
	f := strings.Fields(line)
	if len(f) == 0 {
		return -1, line
	}
	nr, err := strconv.Atoi(f[0])
	if err != nil {
		return -1, line // "running"
	}
	return nr, line
}

// WaitReadable waits in poll(2) until fd has something to read (or an end
// of stream or error to report), and fails tb if it does not within d.
func WaitReadable(tb testing.TB, fd int, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			tb.Fatalf("fd %d not readable within %v", fd, d)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			tb.Fatalf("poll fd %d: %v", fd, err)
		case n > 0:
			return
		}
	}
}

// AcceptQueueLen returns how many established connections wait in the
// accept queue of the listening TCP socket lfd.
func AcceptQueueLen(tb testing.TB, lfd int) int {
	tb.Helper()
	ti, err := unix.GetsockoptTCPInfo(lfd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		tb.Fatalf("TCP_INFO of fd %d: %v", lfd, err)
	}
	return int(ti.Unacked) // a listener reports its accept queue's length here
}

// WaitAcceptQueue waits until at least n connections wait in the accept
// queue of the listening TCP socket lfd, and fails tb if they do not
// within d. A connect(2) may return before the listener has queued the
// connection.
func WaitAcceptQueue(tb testing.TB, lfd, n int, d time.Duration) {
	tb.Helper()
	WaitFor(tb, d, fmt.Sprintf("%d connections in the accept queue of fd %d", n, lfd), func() bool {
		return AcceptQueueLen(tb, lfd) >= n
	})
}
