package test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
)

// echoServer writes back what it receives.
type echoServer struct{ conn.NopHandler }

func (echoServer) OnData(c *conn.Conn, data []byte) { c.Write(data) }

// digestClient hashes what it receives and reports the digest, and the
// cause, when the connection closes.
type digestClient struct {
	conn.NopHandler
	h        hash.Hash // touched on the connection's loop only
	n        int
	done     chan digestResult
	writable chan struct{} // the connection became writable
}

type digestResult struct {
	sum []byte
	n   int
	err error
}

func (d *digestClient) OnData(c *conn.Conn, data []byte) { d.h.Write(data); d.n += len(data) }
func (d *digestClient) OnWritabilityChanged(c *conn.Conn, writable bool) {
	if writable {
		select {
		case d.writable <- struct{}{}:
		default:
		}
	}
}

func (d *digestClient) OnClose(c *conn.Conn, err error) {
	d.done <- digestResult{d.h.Sum(nil), d.n, err}
}

// TestEchoEndToEnd runs conn clients (Dial) against a conn server (Listen)
// for every pairing of backends: each client writes 1 MiB from its own
// goroutine in writes of random sizes, then CloseWrite; the server echoes,
// sees the FIN, flushes and closes; the client's OnClose reports io.EOF and
// the digest of what came back equals that of what was sent. Nothing may be
// left behind: fds, goroutines, io_uring mappings.
func TestEchoEndToEnd(t *testing.T) {
	const (
		clients   = 16
		perClient = 1 << 20
	)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	backends := []loop.Backend{loop.BackendUring, loop.BackendEpoll}
	for _, sb := range backends {
		for _, cb := range backends {
			t.Run(fmt.Sprintf("server=%v/client=%v", sb, cb), func(t *testing.T) {
				if sb == loop.BackendUring || cb == loop.BackendUring {
					testutil.SkipIfNoUring(t)
				}
				testutil.CheckLeaks(t)
				testutil.Watchdog(t, time.Minute)
				newGroup := func(b loop.Backend) *loop.Group {
					g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(2), loop.WithLogger(logger))
					if err != nil {
						if errors.Is(err, ring.ErrNotSupported) {
							t.Skipf("io_uring unavailable: %v", err)
						}
						t.Fatal(err)
					}
					t.Cleanup(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						if err := g.Shutdown(ctx); err != nil {
							t.Errorf("group Shutdown: %v", err)
						}
					})
					return g
				}
				sg, cg := newGroup(sb), newGroup(cb)
				srv, err := conn.Listen(context.Background(), sg, "tcp", "127.0.0.1:0", echoServer{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if err := srv.Shutdown(ctx); err != nil {
						t.Errorf("server Shutdown: %v", err)
					}
				})

				var wg sync.WaitGroup
				for i := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := dialAndEcho(srv.Addr().String(), cg, uint64(i), perClient); err != nil {
							t.Errorf("client %d: %v", i, err)
						}
					}()
				}
				wg.Wait()
				if !testutil.Eventually(10*time.Second, func() bool { return srv.Conns() == 0 }) {
					n := srv.Conns()
					t.Errorf("server still holds %d connections after every client finished", n)
				}
			})
		}
	}
}

// dialAndEcho runs one client: Dial, write n bytes, CloseWrite, and compare
// the digests once the server's close arrives.
func dialAndEcho(addr string, g *loop.Group, seed uint64, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &digestClient{h: sha256.New(), done: make(chan digestResult, 1), writable: make(chan struct{}, 1)}
	c, err := conn.Dial(ctx, g, "tcp", addr, d)
	if err != nil {
		return err
	}
	sent := sha256.New()
	rng := rand.New(rand.NewPCG(seed, 7))
	buf := make([]byte, 64<<10)
	for left := n; left > 0; {
		size := min(1+rng.IntN(len(buf)), left)
		for i := range buf[:size] {
			buf[i] = byte(rng.Uint32())
		}
		sent.Write(buf[:size])
		if _, err := c.Write(buf[:size]); err != nil { // Write copies: buf is reused
			return err
		}
		left -= size
		for !c.Writable() { // stay near the high-water mark
			select {
			case <-d.writable:
			case <-time.After(30 * time.Second):
				return fmt.Errorf("not writable again within 30s with %d bytes queued", c.Buffered())
			}
		}
	}
	if err := c.CloseWrite(); err != nil {
		return err
	}
	select {
	case r := <-d.done:
		if r.err != io.EOF {
			return fmt.Errorf("OnClose(%v), want io.EOF", r.err)
		}
		if r.n != n || !bytes.Equal(r.sum, sent.Sum(nil)) {
			return fmt.Errorf("received %d bytes with a different digest, want %d", r.n, n)
		}
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("no close within 30s")
	}
}
