//go:build ringfault && linux

package conn_test

import (
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// TestFaultCloseKeepsAcceptedWrites runs TestCloseKeepsAcceptedWrites's
// connections with the faults that must cost no byte injected: short
// sends, sends and receives completing with -EAGAIN or -EINTR, receives
// without buffers, single reaps, and ring rebuilds that move the sends in
// flight (none given up). Whatever the close, every record whose Write
// returned nil still arrives, in order, before an orderly end.
func TestFaultCloseKeepsAcceptedWrites(t *testing.T) {
	runs := 40
	if testing.Short() {
		runs = 8
	}
	base := faultSeed(t)
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		restore := loop.SetFaults(loop.Faults{
			Seed:           base + uint64(b),
			ShortSend:      0.2,
			Retry:          0.05,
			NoBufs:         0.03,
			ReapOne:        0.05,
			Rebuild:        0.02,
			RebuildTimeout: time.Second,
		})
		defer restore()
		defer func() { t.Logf("faults injected so far: %+v", loop.InjectedFaults()) }()
		g := ctGroup(t, b, 1, loop.WithRingEntries(16))
		ln := testutil.Loopback(t)
		for _, how := range []string{"goroutine", "task", "writable", "writable-shut", "peer-fin"} {
			t.Run(how, func(t *testing.T) {
				for run := range runs {
					if !clRun(t, g, ln, false, how, run) {
						return
					}
				}
			})
		}
		for _, how := range []string{"goroutine", "task"} {
			t.Run("netconn/"+how, func(t *testing.T) {
				for run := range runs {
					if !clRun(t, g, ln, true, how, run) {
						return
					}
				}
			})
		}
	})
}
