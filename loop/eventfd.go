//go:build linux

package loop

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The wake eventfd both drivers own: other goroutines add to its counter
// to end the loop's wait, and the loop reads the counter back to zero.

// eventfdOne is the 8-byte value both drivers' wake writes: a counter
// increment of 1 in the machine's byte order, as eventfd(2) requires. It
// is never written after init, so concurrent wake calls may share it.
var eventfdOne = func() (b [8]byte) {
	binary.NativeEndian.PutUint64(b[:], 1)
	return b
}()

// writeEventfd adds 1 to eventfd fd's counter. EAGAIN means the counter is
// saturated, so a wakeup is already pending: success.
func writeEventfd(fd int) error {
	for {
		_, err := unix.Write(fd, eventfdOne[:])
		switch err {
		case nil, unix.EAGAIN:
			return nil
		case unix.EINTR:
			continue
		}
		return fmt.Errorf("loop: %w", os.NewSyscallError("write eventfd", err))
	}
}

// readCounter reads the 8-byte counter of fd (an eventfd, a timerfd) into
// buf, which resets it, and reports whether it was non-zero (else EAGAIN).
func readCounter(fd int, buf []byte) bool {
	for {
		_, err := unix.Read(fd, buf)
		if err != unix.EINTR {
			return err == nil
		}
	}
}
