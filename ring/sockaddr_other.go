//go:build !linux

package ring

import (
	"net/netip"

	"golang.org/x/sys/unix"
)

// PutSockaddr encodes the kernel's struct sockaddr on Linux only; elsewhere
// it returns ErrNotSupported.
func PutSockaddr(raw *unix.RawSockaddrAny, sa unix.Sockaddr) (uint32, error) {
	return 0, ErrNotSupported
}

// ParseSockaddr decodes the kernel's struct sockaddr on Linux only;
// elsewhere it returns ErrNotSupported.
func ParseSockaddr(raw *unix.RawSockaddrAny, n uint32) (unix.Sockaddr, error) {
	return nil, ErrNotSupported
}

// Getpeername returns fd's peer address on Linux only; elsewhere it returns
// ErrNotSupported.
func Getpeername(fd int) (unix.Sockaddr, error) { return nil, ErrNotSupported }

// Getsockname returns fd's local address on Linux only; elsewhere it
// returns ErrNotSupported.
func Getsockname(fd int) (unix.Sockaddr, error) { return nil, ErrNotSupported }

// PeerAddrPort returns fd's peer address on Linux only; elsewhere it
// returns ErrNotSupported.
func PeerAddrPort(fd int) (netip.AddrPort, uint32, bool, error) {
	return netip.AddrPort{}, 0, false, ErrNotSupported
}

// LocalAddrPort returns fd's local address on Linux only; elsewhere it
// returns ErrNotSupported.
func LocalAddrPort(fd int) (netip.AddrPort, uint32, bool, error) {
	return netip.AddrPort{}, 0, false, ErrNotSupported
}

// SocketDrops is Linux only; elsewhere it returns ErrNotSupported.
func SocketDrops(fd int) (uint32, error) { return 0, ErrNotSupported }
