//go:build !linux

package ring

import "golang.org/x/sys/unix"

// Sendmsg is Linux only; elsewhere it returns ErrNotSupported.
func Sendmsg(fd int, msg *unix.Msghdr, flags int) (int, error) {
	return 0, ErrNotSupported
}
