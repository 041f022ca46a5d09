package ring

import (
	"runtime"
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

// RegisterEventfdAsync is RegisterEventfd, signalling only for completions
// that did not finish inline during submission (IORING_REGISTER_EVENTFD_ASYNC).
func (r *Ring) RegisterEventfdAsync(fd int) error {
	efd := int32(fd)
	_, err := r.register("EVENTFD_ASYNC", registerEventfdAsync, unsafe.Pointer(&efd), 1)
	return err
}

// UnregisterEventfd removes the registered eventfd.
func (r *Ring) UnregisterEventfd() error {
	_, err := r.register("UNREGISTER_EVENTFD", unregisterEventfd, nil, 0)
	return err
}

// RegisterFiles registers fds as the ring's fixed-file table; an SQE with
// SQEFixedFile then names slot i instead of an fd. A slot of -1 is empty.
// The kernel takes its own references: closing the fds afterwards does not
// affect the table.
// Must be called by the goroutine that owns the ring.
func (r *Ring) RegisterFiles(fds []int32) error {
	if len(fds) == 0 {
		return errnoErr(unix.EINVAL)
	}
	_, err := r.register("FILES", registerFiles, unsafe.Pointer(unsafe.SliceData(fds)), uint32(len(fds)))
	runtime.KeepAlive(fds)
	return err
}

// RegisterFilesSparse registers an empty fixed-file table of n slots
// (IORING_REGISTER_FILES2 with IORING_RSRC_REGISTER_SPARSE, Linux 5.19), to
// be filled by RegisterFilesUpdate or by ops that allocate a slot.
func (r *Ring) RegisterFilesSparse(n uint32) error {
	if n == 0 {
		return errnoErr(unix.EINVAL)
	}
	if !r.kernel.HasFeature(FeatureSparseFiles) {
		return profileRefusal(r.kernel, FeatureSparseFiles)
	}
	reg := RsrcRegister{Nr: n, Flags: RsrcRegisterSparse}
	_, err := r.register("FILES2", registerFiles2, unsafe.Pointer(&reg), uint32(unsafe.Sizeof(reg)))
	return err
}

// RegisterFilesUpdate replaces fixed-file slots off, off+1, … with fds
// (-1 empties a slot, RegisterFilesSkip leaves it). It returns the number of
// slots updated.
func (r *Ring) RegisterFilesUpdate(off uint32, fds []int32) (int, error) {
	if len(fds) == 0 {
		return 0, nil
	}
	up := RsrcUpdate2{Offset: off, Data: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(fds)))), Nr: uint32(len(fds))}
	n, err := r.register("FILES_UPDATE2", registerFilesUpdate2, unsafe.Pointer(&up), uint32(unsafe.Sizeof(up)))
	runtime.KeepAlive(fds)
	return n, err
}

// UnregisterFiles drops the fixed-file table.
func (r *Ring) UnregisterFiles() error {
	_, err := r.register("UNREGISTER_FILES", unregisterFiles, nil, 0)
	return err
}

// RegisterBuffers registers bufs as fixed buffers for READ_FIXED,
// WRITE_FIXED and zero-copy sends with RecvsendFixedBuf; an SQE names
// buffer i in BufIndex. The kernel pins the pages, which counts against
// RLIMIT_MEMLOCK.
//
// Safety: the kernel keeps the buffers' addresses until UnregisterBuffers
// or Close. The caller must keep every buffer reachable (and not reuse it
// for anything else) until then; memory from unix.Mmap is the safest choice.
// Must be called by the goroutine that owns the ring.
func (r *Ring) RegisterBuffers(bufs [][]byte) error {
	if len(bufs) == 0 {
		return errnoErr(unix.EINVAL)
	}
	iov := make([]unix.Iovec, len(bufs))
	for i, b := range bufs {
		if len(b) > 0 {
			iov[i].Base = unsafe.SliceData(b)
		}
		iov[i].SetLen(len(b))
	}
	_, err := r.register("BUFFERS", registerBuffers, unsafe.Pointer(unsafe.SliceData(iov)), uint32(len(iov)))
	runtime.KeepAlive(iov)
	runtime.KeepAlive(bufs)
	return err
}

// UnregisterBuffers drops every registered buffer.
func (r *Ring) UnregisterBuffers() error {
	_, err := r.register("UNREGISTER_BUFFERS", unregisterBuffers, nil, 0)
	return err
}

// RegisterRingFd registers the ring's own fd with the calling thread
// (IORING_REGISTER_RING_FDS, Linux 5.18), so that io_uring_enter skips the
// fd lookup: later enters pass the slot index with EnterRegisteredRing.
//
// The registration belongs to the OS thread, not to the process: the
// calling goroutine must hold runtime.LockOSThread from this call until
// UnregisterRingFd or Close, and make every enter from that thread. The
// event loop goroutine, locked for its whole life, is the intended caller.
// Must be called by the goroutine that owns the ring.
func (r *Ring) RegisterRingFd() error {
	if r.closed {
		return ErrClosed
	}
	if r.ringFdIndex >= 0 {
		return errnoErr(unix.EEXIST)
	}
	if !r.kernel.HasFeature(FeatureRingFds) {
		return profileRefusal(r.kernel, FeatureRingFds)
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

// RingFdRegistered reports whether RegisterRingFd is in effect.
func (r *Ring) RingFdRegistered() bool { return r.ringFdIndex >= 0 }

// UnregisterRingFd undoes RegisterRingFd; it must run on the same thread.
func (r *Ring) UnregisterRingFd() error {
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
// (IORING_REGISTER_ENABLE_RINGS, Linux 5.10); until then submissions fail
// with EBADFD. Registrations made while disabled (restrictions, buffers,
// files) are in place before the first submission.
// Must be called by the goroutine that owns the ring.
func (r *Ring) EnableRings() error {
	_, err := r.register("ENABLE_RINGS", registerEnableRings, nil, 0)
	return err
}
