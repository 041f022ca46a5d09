package testutil

import (
	"testing"

	"golang.org/x/sys/unix"
)

// UDPPair returns two unconnected UDP sockets bound on 127.0.0.1 as raw
// fds, with their addresses, both closed by tb.Cleanup.
func UDPPair(tb testing.TB) (a, b int, aAddr, bAddr *unix.SockaddrInet4) {
	tb.Helper()
	open := func() (int, *unix.SockaddrInet4) {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			tb.Fatalf("socket: %v", err)
		}
		tb.Cleanup(func() { unix.Close(fd) })
		if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			tb.Fatalf("bind: %v", err)
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			tb.Fatalf("getsockname: %v", err)
		}
		return fd, sa.(*unix.SockaddrInet4)
	}
	a, aAddr = open()
	b, bAddr = open()
	return a, b, aAddr, bAddr
}
