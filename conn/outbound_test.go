package conn_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// ctNoReader dials srv from a client that never reads (a small receive
// buffer, so the server's sends stall at once) and returns it with the
// server's connection.
func ctNoReader(t *testing.T, srv *conn.Server, h *ctServerHandler) (net.Conn, *conn.Conn, *ctEvents) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	c, err := d.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sc, ev := h.accepted(t)
	return c, sc, ev
}

// A Write made while more than the outbound limit is queued fails with
// ErrOutboundLimit and queues nothing; the connection closes with a reset
// (the peer reads ECONNRESET, never an orderly end) and OnClose reports
// the error; later Writes fail with net.ErrClosed.
func TestOutboundLimitWrite(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := ctNewServerHandler(t, nil)
		const limit = 256 << 10
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithOutboundLimit(limit))
		client, sc, ev := ctNoReader(t, srv, h)
		p := make([]byte, 48<<10)
		var err error
		for i := 0; i < 10000 && err == nil; i++ {
			// On the loop, so no send completes between the reading of
			// the queue and the Write.
			var before, after int
			done := make(chan struct{})
			sc.Loop().Execute(func() {
				defer close(done)
				before = sc.Buffered()
				_, err = sc.Write(p)
				after = sc.Buffered()
			})
			<-done
			if err == nil && before > limit {
				t.Fatalf("a Write with %d bytes queued succeeded (limit %d)", before, limit)
			}
			if after > limit+len(p) {
				t.Fatalf("%d bytes queued: more than the limit and one write", after)
			}
		}
		if !errors.Is(err, conn.ErrOutboundLimit) {
			t.Fatalf("Write: %v, want an error wrapping ErrOutboundLimit", err)
		}
		if cerr := ev.wait(t); !errors.Is(cerr, conn.ErrOutboundLimit) {
			t.Fatalf("OnClose: %v, want an error wrapping ErrOutboundLimit", cerr)
		}
		if _, err := sc.Write(p); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write after the limit: %v, want net.ErrClosed", err)
		}
		client.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, rerr := io.Copy(io.Discard, client)
		if !errors.Is(rerr, syscall.ECONNRESET) {
			t.Fatalf("the peer read to %v, want ECONNRESET", rerr)
		}
	})
}

// TestPauseReadWhenUnwritableDefault: an echo server whose one client never
// reads. By default reading pauses once the connection queues more than
// half its outbound limit (its loop queues nothing else), so the queue
// stops there plus one receive's answers and the connection stays open;
// WithPauseReadWhenUnwritable(true) stops it at the high-water mark plus
// one receive's answers; with the pause off the echo runs into the
// outbound limit.
func TestPauseReadWhenUnwritableDefault(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		for _, mode := range []string{"default", "on", "off"} {
			g := ctGroup(t, b, 1)
			var mu sync.Mutex
			peak := 0
			h := ctNewServerHandler(t, func(e *ctEvents) {
				e.echo = true
				e.onData = func(c *conn.Conn, _ []byte) {
					mu.Lock()
					peak = max(peak, c.Buffered())
					mu.Unlock()
				}
			})
			var opts []conn.Option
			switch mode {
			case "on":
				opts = append(opts, conn.WithPauseReadWhenUnwritable(true))
			case "off":
				opts = append(opts, conn.WithPauseReadWhenUnwritable(false))
			}
			srv := ctListen(t, "tcp", "127.0.0.1:0", g, h, opts...)
			client, _, ev := ctNoReader(t, srv, h)
			p := make([]byte, 64<<10)
			if mode == "off" {
				// Nothing stops the server reading: the client writes
				// until the server's queue passes its limit and the
				// reset ends the writes (bounded: a few times what the
				// limit and the socket buffers hold).
				for range 4 * conn.DefaultOutboundLimit / len(p) {
					client.SetWriteDeadline(time.Now().Add(10 * time.Second))
					if _, err := client.Write(p); err != nil {
						break
					}
				}
			} else {
				// The server pauses: the client's writes stall, and a
				// second without progress ends them.
				client.SetWriteDeadline(time.Now().Add(time.Second))
				for {
					if _, err := client.Write(p); err != nil {
						break
					}
				}
			}
			mu.Lock()
			got := peak
			mu.Unlock()
			if mode == "off" {
				if err := ev.wait(t); !errors.Is(err, conn.ErrOutboundLimit) {
					t.Fatalf("without the pause: OnClose %v, want an error wrapping ErrOutboundLimit (peak queue %d)", err, got)
				}
				continue
			}
			// One receive's answers: OnData gets at most 128 KiB at a time.
			mark := conn.DefaultOutboundLimit / 2
			if mode == "on" {
				mark = conn.DefaultHighWaterMark
			}
			if bound := mark + 128<<10; got > bound {
				t.Fatalf("pause %s: the queue reached %d bytes, more than %d", mode, got, bound)
			}
			select {
			case <-ev.closed:
				t.Fatalf("pause %s: the connection closed: %v", mode, ev.wait(t))
			default:
			}
			t.Logf("pause %s: peak queue %d KiB", mode, got>>10)
		}
	})
}
