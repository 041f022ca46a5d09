package conn_test

import (
	"testing"

	"github.com/ringloop/ringloop/loop"
)

// TestRecvStarvation: 32 clients each send 256 KiB at once to an echo
// server whose one loop has only 16 provided buffers, so receives run the
// ring dry (ENOBUFS) over and over; on io_uring the loop must have parked
// receives (loop/starved.go), and on both backends every byte comes back
// in order.
func TestRecvStarvation(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1, loop.WithBufferRing(16, 4096))
		h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		s := ctListen(t, "tcp", "127.0.0.1:0", g, h)

		echoBurst(t, s.Addr().String(), 32, 256<<10)
		parked := g.Stats().Total.ParkedRecvs
		t.Logf("%d receives parked for buffers", parked)
		if b == loop.BackendUring && parked == 0 {
			t.Fatal("no receive ran out of provided buffers: the test does not exercise the starved queue")
		}
	})
}
