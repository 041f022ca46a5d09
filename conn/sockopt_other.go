//go:build !linux

package conn

import (
	"time"

	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// Outside Linux the loops cannot be created (loop.NewGroup returns
// ring.ErrNotSupported), so these are never reached; they exist so that code
// using conn builds everywhere.

func newSocket(int) (int, error) { return -1, ring.ErrNotSupported }

func listenSocket(int, unix.Sockaddr, bool, bool, int, keepAlive) (int, error) {
	return -1, ring.ErrNotSupported
}

func applySockopts(int, string, *config, bool) {}

func setNoDelay(int, string, bool) error { return ring.ErrNotSupported }

func setKeepAlive(int, string, time.Duration) error { return ring.ErrNotSupported }

func setBuffer(int, bool, int) error { return ring.ErrNotSupported }

func packetSocket(int, unix.Sockaddr, bool, bool, *config) (int, error) {
	return -1, ring.ErrNotSupported
}

func recvControlRoom(int, int) int { return 0 }

func isUDPSegment(int32, int32) bool { return false }

// backlog is not read outside Linux.
func (ln *listener) backlog() (queued, size int, ok bool) { return 0, 0, false }
