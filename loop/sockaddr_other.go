//go:build !linux

package loop

import (
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// putSockaddr is not available off Linux, where no backend runs.
func putSockaddr(raw *unix.RawSockaddrAny, sa unix.Sockaddr) (uint32, error) {
	return 0, ring.ErrNotSupported
}
