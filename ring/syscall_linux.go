package ring

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The three io_uring system calls. Each returns the kernel's result and, on
// failure, the bare errno (boxed without allocation by errnoErr).
//
// io_uring_setup and io_uring_register use unix.Syscall / unix.Syscall6,
// which let the Go scheduler hand the P to another thread: they allocate,
// pin pages and may wait for the ring to go idle.
//
// io_uring_enter is a blocking call only when it may sleep (GETEVENTS with
// min_complete > 0): through unix.Syscall6, or blockingSyscall6 with
// SetHandOff. An enter that only submits, or runs task work without
// waiting, does inline work (a socket op's whole send or receive path) but
// never waits for I/O, so it uses unix.RawSyscall6: inside unix.Syscall6
// for longer than a sysmon tick the thread would lose its P to a spinning
// thread on a loop whose work all runs on it. The waiting calls in enter.go
// submit first without waiting, so the P is handed off only while the
// thread really sleeps.

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
func sysEnter(fd int, toSubmit, minComplete, flags uint32, arg unsafe.Pointer, argSz uintptr, handOff bool) (int, error) {
	var n uintptr
	var e unix.Errno
	if minComplete == 0 || flags&EnterGetEvents == 0 {
		n, _, e = unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit),
			uintptr(minComplete), uintptr(flags), uintptr(arg), argSz)
	} else if !handOff {
		n, _, e = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit),
			uintptr(minComplete), uintptr(flags), uintptr(arg), argSz)
	} else {
		n, _, e = blockingSyscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit),
			uintptr(minComplete), uintptr(flags), uintptr(arg), argSz)
		runtime.KeepAlive(arg)
	}
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

// EpollWait is epoll_wait(2) (as epoll_pwait with no signal mask, which every
// architecture has) for an event loop's thread: with handOff, a call that
// may sleep (msec != 0) gives the thread's P back first (see Ring.SetHandOff).
// It returns the number of events written to events; EINTR is returned, not
// retried.
func EpollWait(epfd int, events []unix.EpollEvent, msec int, handOff bool) (int, error) {
	if len(events) == 0 {
		return 0, unix.EINVAL
	}
	p := unsafe.Pointer(&events[0])
	var n uintptr
	var e unix.Errno
	switch {
	case msec == 0:
		n, _, e = unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(p),
			uintptr(len(events)), 0, 0, 0)
	case !handOff:
		n, _, e = unix.Syscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(p),
			uintptr(len(events)), uintptr(msec), 0, 0)
	default:
		n, _, e = blockingSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(p),
			uintptr(len(events)), uintptr(msec), 0, 0)
	}
	runtime.KeepAlive(events)
	if e != 0 {
		return 0, errnoErr(e)
	}
	return int(n), nil
}

// Handing the P off. A waiting loop thread normally keeps its P until
// sysmon retakes it, the cheapest wait when all the work runs on the loop.
// But a goroutine the loop made runnable just before (a reader of a
// net.Conn adapter) waits on that P's run queue until then. With handOff
// the call gives the P back before it sleeps, as the runtime does for calls
// it knows to block, at the cost of a thread wakeup; the loop asks for it
// only after a turn that readied one (see Ring.SetHandOff).

//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

// blockingSyscall6 is unix.Syscall6 for a call known to sleep: the thread
// hands its P off before entering the kernel (the runtime's own
// entersyscallblock, which the runtime keeps linkable), and takes one again
// on return as every system call does. Nothing between the two may grow the
// stack, hence nosplit and no race instrumentation.
//
//go:nosplit
//go:norace
func blockingSyscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err unix.Errno) {
	entersyscallblock()
	r1, r2, err = unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	exitsyscall()
	return
}
