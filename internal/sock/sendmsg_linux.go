//go:build linux

package sock

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
		n, _, e := unix.Syscall6(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(msg)), uintptr(flags), 0, 0, 0)
		if e != unix.EINTR {
			return sysResult(n, e)
		}
	}
}

// SendmsgNow is Sendmsg for a send that cannot sleep (flags hold
// unix.MSG_DONTWAIT): a raw system call, which keeps the caller's P and
// does not tell the Go scheduler. A system call made through the scheduler
// wakes its monitor thread whenever that thread sleeps for want of work,
// which a goroutine sending one reply between idle spells meets on nearly
// every send (a thread wakeup and its switches on the sender's CPU, per
// reply). A non-blocking send returns as soon as the socket has taken what
// fits.
func SendmsgNow(fd int, msg *unix.Msghdr, flags int) (int, error) {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(msg)), uintptr(flags|unix.MSG_DONTWAIT), 0, 0, 0)
		if e != unix.EINTR {
			return sysResult(n, e)
		}
	}
}

// SendNow is send(2) of p as SendmsgNow sends (non-blocking, raw): the
// bytes sent, possibly fewer than len(p), or the bare errno. It does not
// allocate.
func SendNow(fd int, p []byte, flags int) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), uintptr(flags|unix.MSG_DONTWAIT), 0, 0)
		if e != unix.EINTR {
			return sysResult(n, e)
		}
	}
}

// sysResult is a system call's result: the count, or the bare errno.
// (The calls stay in each function, with their unsafe.Pointer conversions
// in the call expression, so that what they point at stays put.)
func sysResult(n uintptr, e unix.Errno) (int, error) {
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(n), nil
}

// Mmsghdr is struct mmsghdr, one message of Recvmmsg and Sendmmsg: its
// header and, after the call, the bytes that message received or sent.
type Mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
	_   [4]byte
}

// Recvmmsg is recvmmsg(2) without a timeout: it receives up to len(msgs)
// datagrams, each into the buffers and name its header points at, and
// returns how many arrived (each one's length in Len, its flags, MSG_TRUNC
// among them, in Hdr.Flags, its source's length in Hdr.Namelen). It
// returns the bare errno, EAGAIN when nothing was waiting; EINTR is
// retried. It does not allocate.
func Recvmmsg(fd int, msgs []Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
		if e != unix.EINTR {
			return sysResult(n, e)
		}
	}
}

// Sendmmsg is sendmmsg(2): it sends msgs in order, one datagram each, and
// returns how many were sent (each one's bytes in Len); it stops at the
// first that fails, which is then reported only when it is the first
// (a later call returns its error). EINTR is retried. It does not
// allocate.
func Sendmmsg(fd int, msgs []Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), uintptr(flags), 0, 0)
		if e != unix.EINTR {
			return sysResult(n, e)
		}
	}
}
