//go:build linux

package loop

import (
	"errors"

	"golang.org/x/sys/unix"
)

// socketError is fd's pending socket error (SO_ERROR) as a completion result: 0 or -errno.
func socketError(fd int) int32 {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		return errnoResult(err)
	}
	return -int32(v)
}

// errnoResult turns a system call error into a completion result: 0 or -errno.
func errnoResult(err error) int32 {
	if err == nil {
		return 0
	}
	if en, ok := err.(unix.Errno); ok {
		return -int32(en)
	}
	var en unix.Errno
	if errors.As(err, &en) {
		return -int32(en)
	}
	return -int32(unix.EIO)
}
