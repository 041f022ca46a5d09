//go:build !linux

package loop

import (
	"fmt"

	"github.com/ringloop/ringloop/ring"
)

// epollDriver exists on Linux only (driver_epoll.go). Elsewhere the package
// still compiles, and constructing the driver fails with an error matching
// ring.ErrNotSupported.
type epollDriver struct{ driver }

func newEpollDriver(cfg driverConfig) (*epollDriver, error) {
	return nil, fmt.Errorf("loop: epoll: %w", ring.ErrNotSupported)
}
