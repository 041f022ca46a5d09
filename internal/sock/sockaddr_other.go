//go:build !linux

package sock

import (
	"net/netip"

	"golang.org/x/sys/unix"
)

// PutSockaddr encodes the kernel's struct sockaddr on Linux only; elsewhere
// it returns an error matching errors.ErrUnsupported.
func PutSockaddr(raw *unix.RawSockaddrAny, sa unix.Sockaddr) (uint32, error) {
	return 0, errNotSupported
}

// ParseSockaddr decodes the kernel's struct sockaddr on Linux only;
// elsewhere it returns an error matching errors.ErrUnsupported.
func ParseSockaddr(raw *unix.RawSockaddrAny, n uint32) (unix.Sockaddr, error) {
	return nil, errNotSupported
}

// Getpeername returns fd's peer address on Linux only; elsewhere it returns
// an error matching errors.ErrUnsupported.
func Getpeername(fd int) (unix.Sockaddr, error) { return nil, errNotSupported }

// Getsockname returns fd's local address on Linux only; elsewhere it
// returns an error matching errors.ErrUnsupported.
func Getsockname(fd int) (unix.Sockaddr, error) { return nil, errNotSupported }

// PeerAddrPort returns fd's peer address on Linux only; elsewhere it
// returns an error matching errors.ErrUnsupported.
func PeerAddrPort(fd int) (netip.AddrPort, uint32, bool, error) {
	return netip.AddrPort{}, 0, false, errNotSupported
}

// LocalAddrPort returns fd's local address on Linux only; elsewhere it
// returns an error matching errors.ErrUnsupported.
func LocalAddrPort(fd int) (netip.AddrPort, uint32, bool, error) {
	return netip.AddrPort{}, 0, false, errNotSupported
}
