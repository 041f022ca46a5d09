//go:build !linux

package sock

import "golang.org/x/sys/unix"

// Sendmsg is Linux only; elsewhere it returns an error matching
// errors.ErrUnsupported.
func Sendmsg(fd int, msg *unix.Msghdr, flags int) (int, error) {
	return 0, errNotSupported
}

// SendmsgNow is Linux only; elsewhere it returns an error matching
// errors.ErrUnsupported.
func SendmsgNow(fd int, msg *unix.Msghdr, flags int) (int, error) {
	return 0, errNotSupported
}

// SendNow is Linux only; elsewhere it returns an error matching
// errors.ErrUnsupported.
func SendNow(fd int, p []byte, flags int) (int, error) { return 0, errNotSupported }

// Mmsghdr is struct mmsghdr (Linux only).
type Mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
	_   [4]byte
}

// Recvmmsg is Linux only; elsewhere it returns an error matching
// errors.ErrUnsupported.
func Recvmmsg(fd int, msgs []Mmsghdr, flags int) (int, error) { return 0, errNotSupported }

// Sendmmsg is Linux only; elsewhere it returns an error matching
// errors.ErrUnsupported.
func Sendmmsg(fd int, msgs []Mmsghdr, flags int) (int, error) { return 0, errNotSupported }
