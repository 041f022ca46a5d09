//go:build !linux

package ring

import "golang.org/x/sys/unix"

// Sendmsg is Linux only; elsewhere it returns ErrNotSupported.
func Sendmsg(fd int, msg *unix.Msghdr, flags int) (int, error) {
	return 0, ErrNotSupported
}

// Mmsghdr is struct mmsghdr (Linux only).
type Mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
	_   [4]byte
}

// Recvmmsg is Linux only; elsewhere it returns ErrNotSupported.
func Recvmmsg(fd int, msgs []Mmsghdr, flags int) (int, error) { return 0, ErrNotSupported }

// Sendmmsg is Linux only; elsewhere it returns ErrNotSupported.
func Sendmmsg(fd int, msgs []Mmsghdr, flags int) (int, error) { return 0, ErrNotSupported }

// Recv is Linux only; elsewhere it returns ErrNotSupported.
func Recv(fd int, p []byte, flags int) (int, error) { return 0, ErrNotSupported }
