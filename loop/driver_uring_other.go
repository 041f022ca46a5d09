//go:build !linux

package loop

import (
	"fmt"
	"time"

	"github.com/ringloop/ringloop/ring"
)

// On systems without io_uring the uring backend still type-checks, and its
// constructor fails with an error matching ring.ErrNotSupported, so the auto
// backend falls back and a forced uring backend reports why.

// uringDriver is the io_uring backend; see driver_uring.go.
type uringDriver struct{}

// newUringDriver reports that io_uring is not available on this system.
func newUringDriver(cfg driverConfig) (*uringDriver, error) {
	return nil, fmt.Errorf("loop: uring backend: %w", ring.ErrNotSupported)
}

func (d *uringDriver) backend() Backend                              { return BackendUring }
func (d *uringDriver) start() error                                  { return ring.ErrNotSupported }
func (d *uringDriver) submit(o *op) error                            { return ring.ErrNotSupported }
func (d *uringDriver) cancel(o *op) error                            { return ring.ErrNotSupported }
func (d *uringDriver) wake() error                                   { return ring.ErrNotSupported }
func (d *uringDriver) close() error                                  { return nil }
func (d *uringDriver) features() Features                            { return Features{Backend: BackendUring} }
func (d *uringDriver) injectStall(n int)                             {}
func (d *uringDriver) quarantineBufs() uint64                        { return 0 }
func (d *uringDriver) setHandOff(bool)                               {}
func (d *uringDriver) counters(*Stats)                               {}
func (d *uringDriver) rebuild(*opTable, completionSink) (int, error) { return 0, ring.ErrNotSupported }
func (d *uringDriver) poll(time.Duration, int, completionSink) (pollResult, error) {
	return pollResult{}, ring.ErrNotSupported
}
