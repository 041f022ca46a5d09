//go:build linux

package sock_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/internal/testutil"
)

// TestSocketDrops: a fresh socket has dropped nothing; datagrams sent to a
// full receive buffer are counted; a bad fd returns the bare errno.
func TestSocketDrops(t *testing.T) {
	a, b, _, bAddr := testutil.UDPPair(t)
	if d, err := sock.SocketDrops(b); d != 0 || err != nil {
		t.Fatalf("fresh socket: SocketDrops = %d, %v", d, err)
	}
	if err := unix.SetsockoptInt(b, unix.SOL_SOCKET, unix.SO_RCVBUF, 1); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 1024)
	const sent = 64
	for range sent {
		if err := unix.Sendto(a, payload, 0, bAddr); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := sock.SocketDrops(b); d == 0 || d > sent || err != nil {
		t.Fatalf("after %d datagrams into a minimal buffer: SocketDrops = %d, %v", sent, d, err)
	}
	if _, err := sock.SocketDrops(-1); err != unix.EBADF {
		t.Fatalf("bad fd: %v, want the bare EBADF", err)
	}
}
