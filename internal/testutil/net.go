package testutil

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// Loopback returns a TCP listener on 127.0.0.1:0, closed by tb.Cleanup.
func Loopback(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln
}

// ListenFd returns a raw, blocking TCP listening socket on 127.0.0.1:0 (for
// io_uring ACCEPT) and its address. tb.Cleanup closes it.
func ListenFd(tb testing.TB) (int, *unix.SockaddrInet4) {
	tb.Helper()
	fd := socket(tb)
	tb.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("bind: %v", err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		tb.Fatalf("listen: %v", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		tb.Fatalf("getsockname: %v", err)
	}
	return fd, sa.(*unix.SockaddrInet4)
}

// Dial connects a new raw, blocking TCP socket to addr. tb.Cleanup closes it
// unless the test closes it first and says so by calling the returned close
// function (which is idempotent), so a reused fd number is never closed twice.
func Dial(tb testing.TB, addr *unix.SockaddrInet4) (fd int, closeFn func()) {
	tb.Helper()
	fd = socket(tb)
	closeFn = closeOnce(fd)
	tb.Cleanup(closeFn)
	if err := unix.Connect(fd, addr); err != nil {
		tb.Fatalf("connect: %v", err)
	}
	return fd, closeFn
}

// TCPPair returns the two ends of a connected loopback TCP connection as raw
// blocking fds, both closed by tb.Cleanup.
func TCPPair(tb testing.TB) (client, server int) {
	tb.Helper()
	lfd, addr := ListenFd(tb)
	client, _ = Dial(tb, addr)
	server, _, err := unix.Accept(lfd)
	if err != nil {
		tb.Fatalf("accept: %v", err)
	}
	unix.CloseOnExec(server)
	tb.Cleanup(closeOnce(server))
	return client, server
}

// SocketPair returns a connected AF_UNIX stream socket pair, both ends
// closed by tb.Cleanup.
func SocketPair(tb testing.TB) (a, b int) {
	tb.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("socketpair: %v", err)
	}
	unix.CloseOnExec(fds[0])
	unix.CloseOnExec(fds[1])
	tb.Cleanup(closeOnce(fds[0]))
	tb.Cleanup(closeOnce(fds[1]))
	return fds[0], fds[1]
}

func closeOnce(fd int) func() {
	done := false
	return func() {
		if !done {
			done = true
			unix.Close(fd)
		}
	}
}

// socket returns a new blocking IPv4 TCP socket with close-on-exec set
// (portable spelling: SOCK_CLOEXEC is Linux-only; the tests are
// single-process, so the window between the two calls does not matter).
func socket(tb testing.TB) int {
	tb.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("socket: %v", err)
	}
	unix.CloseOnExec(fd)
	return fd
}
