//go:build !linux

package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// On systems without io_uring the package still compiles with its whole
// API, so code built on it type-checks everywhere; every system call below
// fails with ENOSYS, which New reports as an error matching ErrNotSupported.

func sysSetup(entries uint32, p *Params) (int, error) { return -1, unix.ENOSYS }

func sysEnter(fd int, toSubmit, minComplete, flags uint32, arg unsafe.Pointer, argSz uintptr, handOff bool) (int, error) {
	return 0, unix.ENOSYS
}

func sysRegister(fd int, opcode uint32, arg unsafe.Pointer, nr uint32) (int, error) {
	return 0, unix.ENOSYS
}

func closeFd(fd int) error { return unix.Close(fd) }

func mmapRing(fd int, offset int64, size uintptr) (unsafe.Pointer, error) { return nil, unix.ENOSYS }

func mmapAnon(size uintptr) (unsafe.Pointer, error) { return nil, unix.ENOSYS }

func mmapAnonLazy(size uintptr) (unsafe.Pointer, error) { return nil, unix.ENOSYS }

func munmap(p unsafe.Pointer, size uintptr) error { return nil }
