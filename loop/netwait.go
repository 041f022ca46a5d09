//go:build linux

package loop

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// netWaiter parks the loop goroutine on the Go runtime's netpoller until a
// file descriptor becomes readable or a deadline passes: the uring driver's
// registered eventfd, or the epoll driver's epoll instance. Parked there, a
// shared-thread loop gives its P back at once instead of holding it in a
// system call (docs/loop.md, "Waiting").
//
// The waiter owns a duplicate of the fd (the same open file description, so
// the same readiness), which it closes in close; the driver keeps its own.
type netWaiter struct {
	hooks   *parkHooks // may be nil
	file    *os.File
	rawConn syscall.RawConn
	check   func() bool // reports readiness without blocking; run by RawConn.Read
	readFn  func(uintptr) bool
}

// newNetWaiter registers a duplicate of fd with the netpoller. check is
// called before parking and after every readiness edge: it returns true
// when the wait is over (it may consume the readiness, as reading an
// eventfd does). hooks, if not nil, run around every wait.
func newNetWaiter(fd int, name string, check func() bool, hooks *parkHooks) (*netWaiter, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", err)
	}
	// Non-blocking, or os.NewFile does not register the fd with the
	// netpoller. The flag belongs to the shared file description; neither
	// an eventfd read nor epoll_wait (which has its own timeout) is
	// affected otherwise.
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, os.NewSyscallError("fcntl(O_NONBLOCK)", err)
	}
	f := os.NewFile(uintptr(dup), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("loop: netpoller registration of %s: %w", name, err)
	}
	w := &netWaiter{file: f, rawConn: rc, check: check, hooks: hooks}
	w.readFn = func(uintptr) bool { return w.check() }
	// A probe: a file the netpoller refused reports ErrNoDeadline.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("loop: netpoller registration of %s: %w", name, err)
	}
	return w, nil
}

// wait returns when check reports true (ready), or when timeout passes
// (ready false, err nil); timeout < 0 waits without a deadline. The
// readiness edge that arrives between check and parking is not lost: the
// runtime keeps it for the parked goroutine.
func (w *netWaiter) wait(timeout time.Duration) (ready bool, err error) {
	var dl time.Time
	if timeout >= 0 {
		dl = time.Now().Add(timeout)
	}
	if err := w.file.SetReadDeadline(dl); err != nil {
		return false, err
	}
	if h := w.hooks; h != nil && h.park != nil {
		h.park()
		err = w.rawConn.Read(w.readFn)
		h.resume()
	} else {
		err = w.rawConn.Read(w.readFn)
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false, nil
	}
	return false, err
}

// close unregisters and closes the duplicate fd.
func (w *netWaiter) close() error {
	if w == nil {
		return nil
	}
	return w.file.Close()
}
