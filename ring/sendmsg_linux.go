//go:build linux

package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sendmsg is sendmsg(2) on a msghdr the caller built: x/sys/unix builds its
// own (and allocates its iovec array), so code that keeps a reusable
// msghdr, such as the event loop's epoll backend, sends through this one.
// It returns the bytes sent (possibly fewer than the iovecs hold) or the
// bare errno (errors.Is(err, unix.EAGAIN) and a type assertion to
// unix.Errno both work); EINTR is retried. It does not allocate.
//
// msg and everything it points at (msg_name, the iovec array and the
// buffers, msg_control) are read during the call only. flags are passed as
// given: add unix.MSG_NOSIGNAL to get EPIPE instead of SIGPIPE.
func Sendmsg(fd int, msg *unix.Msghdr, flags int) (int, error) {
	for {
		n, _, e := unix.Syscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(msg)), uintptr(flags))
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, errnoErr(e)
	}
}
