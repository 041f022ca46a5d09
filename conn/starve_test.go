package conn_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"sync"
	"testing"
	"time"

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

		const clients, size = 32, 256 << 10
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc, err := net.Dial("tcp", s.Addr().String())
				if err != nil {
					errs <- err
					return
				}
				defer nc.Close()
				msg := make([]byte, size)
				rand.Read(msg)
				nc.SetDeadline(time.Now().Add(30 * time.Second))
				werr := make(chan error, 1)
				go func() { _, err := nc.Write(msg); werr <- err }()
				got := make([]byte, size)
				if _, err := io.ReadFull(nc, got); err != nil {
					errs <- err
					return
				}
				if err := <-werr; err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, msg) {
					errs <- io.ErrUnexpectedEOF
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("client: %v", err)
		}
		parked := g.Stats().Total.ParkedRecvs
		t.Logf("%d receives parked for buffers", parked)
		if b == loop.BackendUring && !g.Loop(0).Features().BufRing {
			// The echo above still ran: the integrity half of the test
			// holds on every kernel.
			t.Skip("no provided-buffer ring (a kernel, or profile, before 5.19): receives read into the loop's own buffers only when data is there, so none starves")
		}
		if b == loop.BackendUring && parked == 0 {
			t.Fatal("no receive ran out of provided buffers: the test does not exercise the starved queue")
		}
	})
}
