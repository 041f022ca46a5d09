//go:build !linux

package loop

import (
	"fmt"

	"github.com/ringloop/ringloop/ring"
)

// On systems without io_uring the uring backend still type-checks, and its
// constructor fails with an error matching ring.ErrNotSupported, so the auto
// backend falls back and a forced uring backend reports why.

// uringDriver is the io_uring backend; see driver_uring.go. Here it is
// never made.
type uringDriver struct{ driver }

// newUringDriver reports that io_uring is not available on this system.
func newUringDriver(cfg driverConfig) (*uringDriver, error) {
	return nil, fmt.Errorf("loop: uring backend: %w", ring.ErrNotSupported)
}
