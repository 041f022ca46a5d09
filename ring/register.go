package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// register calls io_uring_register on the ring's real fd (not the registered
// index: IORING_REGISTER_USE_REGISTERED_RING needs Linux 6.3).
func (r *Ring) register(name string, opcode uint32, arg unsafe.Pointer, nr uint32) (int, error) {
	if r.closed {
		return 0, ErrClosed
	}
	for {
		n, err := sysRegister(r.fd, opcode, arg, nr)
		if err == errEINTR {
			// Registration waits for the ring to go idle and can be
			// interrupted before doing anything; it is safe to retry.
			continue
		}
		return n, wrapSyscall("io_uring_register("+name+")", err)
	}
}

// RegisterEventfd makes the kernel signal eventfd fd whenever it posts a
// CQE (IORING_REGISTER_EVENTFD), so a ring can be watched by epoll or a
// blocking read. The eventfd stays owned by the caller.
// Must be called by the goroutine that owns the ring.
func (r *Ring) RegisterEventfd(fd int) error {
	efd := int32(fd)
	_, err := r.register("EVENTFD", registerEventfd, unsafe.Pointer(&efd), 1)
	return err
}

// RegisterRingFd registers the ring's own fd with the calling thread
// (IORING_REGISTER_RING_FDS), so that io_uring_enter skips the
// fd lookup: later enters pass the slot index with EnterRegisteredRing.
//
// The registration belongs to the OS thread, not to the process: the
// calling goroutine must hold runtime.LockOSThread from this call until
// Close, and make every enter from that thread. The
// event loop goroutine, locked for its whole life, is the intended caller.
// Must be called by the goroutine that owns the ring.
func (r *Ring) RegisterRingFd() error {
	if r.closed {
		return ErrClosed
	}
	if r.ringFdIndex >= 0 {
		return errnoErr(unix.EEXIST)
	}
	up := RingFdUpdate{Offset: ^uint32(0), Data: uint64(r.fd)} // offset -1: kernel picks a slot
	n, err := r.register("RING_FDS", registerRingFds, unsafe.Pointer(&up), 1)
	if err != nil {
		return err
	}
	if n != 1 {
		return wrapSyscall("io_uring_register(RING_FDS)", errnoErr(unix.EINVAL))
	}
	r.ringFdIndex = int(up.Offset)
	r.enterFd = r.ringFdIndex
	r.enterFlags |= EnterRegisteredRing
	return nil
}

// unregisterRingFd undoes RegisterRingFd; it must run on the same thread.
func (r *Ring) unregisterRingFd() error {
	if r.ringFdIndex < 0 {
		return nil
	}
	up := RingFdUpdate{Offset: uint32(r.ringFdIndex)}
	// Go back to the plain fd whatever happens: a failed unregister (wrong
	// thread) must not leave enters pointing at a slot of another thread.
	r.ringFdIndex = -1
	r.enterFd = r.fd
	r.enterFlags &^= EnterRegisteredRing
	if r.fd < 0 {
		return nil
	}
	n, err := sysRegister(r.fd, unregisterRingFds, unsafe.Pointer(&up), 1)
	if err == nil && n != 1 {
		err = errnoErr(unix.ENOENT)
	}
	return wrapSyscall("io_uring_register(UNREGISTER_RING_FDS)", err)
}

// EnableRings starts a ring created with SetupRDisabled
// (IORING_REGISTER_ENABLE_RINGS); until then submissions fail with EBADFD.
// Must be called by the goroutine that owns the ring.
func (r *Ring) EnableRings() error {
	_, err := r.register("ENABLE_RINGS", registerEnableRings, nil, 0)
	return err
}
