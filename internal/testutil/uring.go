package testutil

import (
	"errors"
	"sync"
	"testing"

	"github.com/ringloop/ringloop/ring"
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

// RequireOp skips tb unless the running kernel supports op, according to
// IORING_REGISTER_PROBE (cached once per process).
func RequireOp(tb testing.TB, op ring.Opcode) {
	tb.Helper()
	SkipIfNoUring(tb)
	p, err := ring.GetProbe()
	if err != nil {
		if errors.Is(err, ring.ErrNotSupported) {
			tb.Skipf("opcode probe unavailable: %v", err)
		}
		tb.Fatalf("opcode probe: %v", err)
	}
	if !p.Supported(op) {
		tb.Skipf("kernel lacks io_uring opcode %d", op)
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
