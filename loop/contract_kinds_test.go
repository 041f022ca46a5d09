//go:build linux

package loop

import (
	"cmp"
	"fmt"
	"os"
	"testing"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// contractKernels are the kernel profiles the uring driver runs the
// contract under; "" is the running kernel. RINGLOOP=kernel=<version>,
// when set, picks one (CI repeats the package per profile); one before
// 6.1, which the uring driver refuses, runs epoll only.
var contractKernels = []string{"", "6.1"}

func epollKind() driverKind {
	return driverKind{
		name:          "epoll",
		be:            BackendEpoll,
		open:          func(c driverConfig) (driver, error) { return newEpollDriver(c) },
		errClosed:     errEpollClosed,
		recvBufYields: true,
		handle:        func(d driver) int { return d.(*epollDriver).epollFd },
		idle: func(d driver) string {
			e := d.(*epollDriver)
			if e.pool.mem != nil && len(e.pool.free) != e.pool.count {
				return fmt.Sprintf("%d of %d receive buffers", e.pool.count-len(e.pool.free), e.pool.count)
			}
			return ""
		},
	}
}

func uringKind(k ring.Kernel) driverKind {
	return driverKind{
		name:      "uring/kernel=" + cmp.Or(k.String(), "running"),
		be:        BackendUring,
		kernel:    k,
		open:      func(c driverConfig) (driver, error) { return newUringDriver(c) },
		skip:      testutil.SkipIfNoUring,
		errClosed: errDriverClosed,
		handle:    func(d driver) int { return d.(*uringDriver).r.Fd() },
	}
}

// TestDriverContract runs the driver contract on epoll, on uring on the
// running kernel and on uring under each kernel profile.
func TestDriverContract(t *testing.T) {
	kernels := contractKernels
	if env := parseEnv(os.Getenv(envName)).kernel; env != "" {
		kernels = []string{env}
	}
	run := func(t *testing.T, k driverKind) {
		testDriverContract(t, func(tb testing.TB, opts ...harnessOpt) *driverHarness { return newDriverHarness(tb, k, opts...) })
	}
	t.Run("backend=epoll", func(t *testing.T) { run(t, epollKind()) })
	t.Run("backend=uring", func(t *testing.T) {
		for _, s := range kernels {
			if k := ring.MustKernel(s); !k.IsZero() && !k.Has(uringFloor) {
				t.Logf("kernel=%s: the uring backend runs from %v", s, uringFloor)
				continue
			}
			t.Run("kernel="+cmp.Or(s, "running"), func(t *testing.T) { run(t, uringKind(ring.MustKernel(s))) })
		}
	})
}
