package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The three io_uring system calls. Each returns the kernel's result and, on
// failure, the bare errno (boxed without allocation by errnoErr).
//
// All three use unix.Syscall / unix.Syscall6, which tell the Go scheduler the
// thread may block so it can hand the P to another thread:
//   - io_uring_enter with IORING_ENTER_GETEVENTS and min_complete > 0 sleeps
//     until completions arrive; even without GETEVENTS, submission can do
//     inline work of unbounded length (copying a send, faulting pages).
//   - io_uring_setup and io_uring_register allocate, pin pages and may wait
//     for the ring to quiesce (file and buffer updates).
// RawSyscall6 would save roughly 20 ns per call but would stall the P for the
// whole call; the runtime's netpoll reserves it for calls that cannot block.

// sysSetup is io_uring_setup(2). p is read and written by the kernel during
// the call only.
func sysSetup(entries uint32, p *Params) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	if e != 0 {
		return -1, errnoErr(e)
	}
	return int(fd), nil
}

// sysEnter is io_uring_enter(2). arg (a *GetEventsArg with EnterExtArg, or a
// sigset) is read during the call only; the caller keeps it reachable, which
// the uintptr conversion inside the Syscall6 argument list guarantees for
// the duration of the call.
//
// EINTR is returned to the caller, never retried here: only the caller knows
// whether the submission part already happened and how long it still wants
// to wait (see enter.go).
func sysEnter(fd int, toSubmit, minComplete, flags uint32, arg unsafe.Pointer, argSz uintptr) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit),
		uintptr(minComplete), uintptr(flags), uintptr(arg), argSz)
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(n), nil
}

// sysRegister is io_uring_register(2). arg points at nr entries of the
// opcode's argument type and is read or written during the call only.
func sysRegister(fd int, opcode uint32, arg unsafe.Pointer, nr uint32) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(fd), uintptr(opcode),
		uintptr(arg), uintptr(nr), 0, 0)
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(n), nil
}

// closeFd closes fd, retrying nothing: close(2) must not be retried on Linux.
func closeFd(fd int) error { return unix.Close(fd) }
