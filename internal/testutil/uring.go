package testutil

import (
	"errors"
	"sync"
	"testing"

	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

var uringState struct {
	sync.Once
	err error // nil when io_uring_setup works
}

// UringErr returns why io_uring cannot be used here, or nil when a ring can
// be created. The answer is computed once per process.
func UringErr() error {
	uringState.Do(func() {
		r, err := ring.New(2, nil)
		if err != nil {
			uringState.err = err
			return
		}
		uringState.err = r.Close()
	})
	return uringState.err
}

// SkipIfNoUring skips tb when io_uring_setup is refused: ENOSYS (kernel too
// old), EPERM (seccomp, kernel.io_uring_disabled) or ENOMEM (memlock), all of
// which match ring.ErrNotSupported. The skip message carries the reason. Any
// other failure to create a ring fails the test instead.
func SkipIfNoUring(tb testing.TB) {
	tb.Helper()
	err := UringErr()
	switch {
	case err == nil:
	case errors.Is(err, ring.ErrNotSupported):
		tb.Skipf("io_uring unavailable: %v", err)
	default:
		tb.Fatalf("io_uring setup failed: %v", err)
	}
}

// RequireKernel skips tb unless the running kernel's release is v or
// later (uname(2)), for features a kernel has from a release on.
func RequireKernel(tb testing.TB, v string) {
	tb.Helper()
	SkipIfNoUring(tb)
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return
	}
	rel := unix.ByteSliceToString(u.Release[:])
	if k, err := ring.ParseKernel(rel); err == nil && !k.Has(ring.MustKernel(v)) {
		tb.Skipf("kernel %s predates %s", rel, v)
	}
}

// RequireSetupFlags skips tb unless the kernel accepts every bit of flags at
// io_uring_setup (ring.SupportedSetupFlags).
func RequireSetupFlags(tb testing.TB, flags uint32) {
	tb.Helper()
	SkipIfNoUring(tb)
	if !ring.SetupFlagSupported(flags) {
		tb.Skipf("kernel refuses setup flags %#x", flags)
	}
}
