package conn_test

import (
	"io"
	"math"
	"net"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// TestGracefulShutdownLingers: a group shutting down gracefully closes its
// connections as Close does, so bytes a handler queued still reach a slow
// reader, followed by an orderly end, never a reset: the loop's
// termination waits for them (up to the shutdown's timeout), with a quiet
// period of 0 and for a connection already lingering when the shutdown
// starts.
func TestGracefulShutdownLingers(t *testing.T) {
	const size = 8 << 20
	// unbounded: a linger too long to add to the clock
	// (WithLinger(math.MaxInt64)) holds the loop's termination like any
	// other, up to the shutdown's timeout.
	for _, b := range []loop.Backend{loop.BackendUring, loop.BackendEpoll} {
		for _, mode := range []string{"shutdown", "close-then-shutdown", "unbounded"} {
			t.Run(b.String()+"/"+mode, func(t *testing.T) {
				if b == loop.BackendUring {
					testutil.SkipIfNoUring(t)
				}
				testutil.CheckLeaks(t)
				testutil.Watchdog(t, 60*time.Second)
				g := ctGroup(t, b, 1)
				payload := make([]byte, size)
				for i := range payload {
					payload[i] = byte(i*7 + i>>11)
				}
				queued := make(chan struct{})
				h := ctNewServerHandler(t, func(e *ctEvents) {
					e.onData = func(c *conn.Conn, _ []byte) {
						c.Write(payload)
						if mode == "close-then-shutdown" {
							c.Close()
						}
						close(queued)
					}
				})
				// A linger longer than the slow reader needs on a loaded
				// machine (8 MiB through its 64 KiB buffer): the test is
				// about the shutdown lingering as Close does, not about
				// the default's length.
				opts := []conn.Option{conn.WithLinger(30 * time.Second)}
				if mode == "unbounded" {
					opts = []conn.Option{conn.WithLinger(math.MaxInt64)}
				}
				srv := ctListen(t, "tcp4", "127.0.0.1:0", g, h, opts...)
				cl, err := net.Dial("tcp4", srv.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				cl.(*net.TCPConn).SetReadBuffer(64 << 10)
				cl.Write([]byte("go"))
				<-queued
				if err := g.ShutdownGracefully(0, 20*time.Second); err != nil {
					t.Fatal(err)
				}
				// A slow reader: it starts once the shutdown closed the
				// connection (its hooks run after the first turn that
				// sees it), with the payload still queued.
				ctTurnPasses(t, g.Loop(0))
				cl.SetReadDeadline(time.Now().Add(30 * time.Second))
				got, err := io.ReadAll(cl)
				if err != nil {
					t.Fatalf("after %d of %d bytes: %v (a reset drops what was queued)", len(got), size, err)
				}
				if len(got) != size {
					t.Fatalf("%d of %d bytes, then an orderly end", len(got), size)
				}
				for i := range got {
					if got[i] != payload[i] {
						t.Fatalf("byte %d differs", i)
					}
				}
				<-g.Done()
			})
		}
	}
}
