package ring

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Sentinel errors. Every error string of this package starts with "ring: ".
var (
	// ErrNotSupported reports that io_uring, or a feature of it, is not
	// available on this system. Errors from New that wrap it also keep the
	// errno that io_uring_setup returned, so both of these hold:
	//
	//	errors.Is(err, ring.ErrNotSupported)
	//	errors.Is(err, unix.EPERM)
	ErrNotSupported = errors.New("ring: io_uring not supported")

	// ErrClosed is returned by methods called on a Ring (or BufRing) after
	// its Close.
	ErrClosed = errors.New("ring: closed")

	// ErrSQFull is returned by GetSQE when every SQ slot holds an entry the
	// kernel has not consumed yet. Submit, then try again.
	ErrSQFull = errors.New("ring: submission queue full")
)

// errnoBoxes holds every errno below 256 already converted to an error, so
// Errno never allocates on the completion path (cf. syscall.errnoErr).
var errnoBoxes = func() (t [256]error) {
	for i := range t {
		t[i] = unix.Errno(i)
	}
	return t
}()

// Errno converts a CQE result into an error: nil when res >= 0, otherwise
// the bare unix.Errno for -res, so errors.Is(err, unix.ECONNRESET) and a
// type assertion to unix.Errno both work. It does not allocate.
// Safe for concurrent use.
func Errno(res int32) error {
	if res >= 0 {
		return nil
	}
	return errnoErr(unix.Errno(-int64(res)))
}

// errnoErr returns e as an error without allocating for common values.
func errnoErr(e unix.Errno) error {
	if e < unix.Errno(len(errnoBoxes)) {
		return errnoBoxes[e]
	}
	return e
}

// UnsupportedError reports an operation or feature that the running kernel
// lacks. It matches ErrNotSupported with errors.Is. MinKernel is the first
// Linux release that has it, as listed in docs/kernel-support.md.
type UnsupportedError struct {
	Op        string // what was asked for, e.g. "IORING_OP_SEND_ZC"
	MinKernel string // e.g. "6.0"
}

func (e *UnsupportedError) Error() string {
	if e.MinKernel == "" {
		return "ring: " + e.Op + " not supported"
	}
	return "ring: " + e.Op + " not supported (requires Linux " + e.MinKernel + ")"
}

// Is makes errors.Is(err, ErrNotSupported) hold.
func (e *UnsupportedError) Is(target error) bool { return target == ErrNotSupported }

// SetupError reports that io_uring_setup(2) failed. When the errno means
// io_uring is unusable here, it matches ErrNotSupported as well as the errno:
//
//	ENOSYS  the kernel has no io_uring (or a seccomp filter hides it)
//	EPERM   refused by seccomp or by sysctl kernel.io_uring_disabled
//	ENOMEM  the ring does not fit in RLIMIT_MEMLOCK
//
// Any other errno (EINVAL for parameters the kernel rejects, EMFILE, …)
// matches only itself.
type SetupError struct {
	Errno unix.Errno
}

func (e *SetupError) Error() string {
	s := "ring: io_uring_setup: " + e.Errno.Error()
	switch e.Errno {
	case unix.ENOSYS:
		s += " (kernel without io_uring)"
	case unix.EPERM:
		s += " (refused by seccomp or kernel.io_uring_disabled)"
	case unix.ENOMEM:
		s += " (locked-memory limit too low, see ulimit -l)"
	}
	return s
}

// Unwrap returns the errno, and ErrNotSupported when the errno means
// io_uring is unusable here.
func (e *SetupError) Unwrap() []error {
	switch e.Errno {
	case unix.ENOSYS, unix.EPERM, unix.ENOMEM:
		return []error{ErrNotSupported, e.Errno}
	}
	return []error{e.Errno}
}

// syscallError wraps errno the way os.NewSyscallError does, with the
// package prefix: "ring: io_uring_register(EVENTFD): bad file descriptor".
// errors.Is(err, errno) holds.
type syscallError struct {
	call string
	err  error
}

func (e *syscallError) Error() string { return "ring: " + e.call + ": " + e.err.Error() }
func (e *syscallError) Unwrap() error { return e.err }

func wrapSyscall(call string, err error) error {
	if err == nil {
		return nil
	}
	return &syscallError{call: call, err: err}
}
