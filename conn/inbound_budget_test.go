package conn_test

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// lineKeeper is a ReadHandler of a line protocol that answers each line
// with its length and reports how its connection closed. It scans every
// byte once: scanned counts the bytes of data it already looked at, which
// the next call's data starts with.
type lineKeeper struct {
	conn.NopHandler
	scanned int
	closed  chan error
}

func (h *lineKeeper) OnRead(c *conn.Conn, data []byte) int {
	consumed := 0
	for {
		i := bytes.IndexByte(data[consumed+h.scanned:], '\n')
		if i < 0 {
			h.scanned = len(data) - consumed
			return consumed
		}
		c.Write([]byte("ok\n"))
		consumed += h.scanned + i + 1
		h.scanned = 0
	}
}

func (h *lineKeeper) OnClose(c *conn.Conn, err error) { h.closed <- err }

// TestInboundLimitDefault: with default options a line one byte longer
// than DefaultInboundLimit closes its connection with ErrInboundLimit; with
// the limit raised the same line is answered.
func TestInboundLimitDefault(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		for _, raised := range []bool{false, true} {
			h := &lineKeeper{closed: make(chan error, 1)}
			var opts []conn.Option
			if raised {
				opts = append(opts, conn.WithInboundLimit(1<<20))
			}
			srv, err := conn.ListenFunc(t.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler { return h }, opts...)
			if err != nil {
				t.Fatal(err)
			}
			nc, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			line := append(bytes.Repeat([]byte("x"), conn.DefaultInboundLimit+1), '\n')
			go nc.Write(line)
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 16)
			n, rerr := nc.Read(buf)
			if raised {
				if rerr != nil || string(buf[:n]) != "ok\n" {
					t.Errorf("limit raised: read %q, %v; want the answer", buf[:n], rerr)
				}
			} else {
				select {
				case err := <-h.closed:
					if !errors.Is(err, conn.ErrInboundLimit) {
						t.Errorf("default limit: OnClose %v, want ErrInboundLimit", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("default limit: the connection stayed open")
				}
			}
			nc.Close()
			srv.Close()
		}
	})
}

// TestInboundBudget: connections that each stay under their own limit but
// together pass the group's budget are closed, the largest first, while a
// connection keeping a few bytes goes on; the loop's count of kept bytes
// goes back to zero once they are all gone.
func TestInboundBudget(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		const budget = 512 << 10
		closed := make(chan error, 16)
		srv, err := conn.ListenFunc(t.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler {
			return &lineKeeper{closed: closed}
		}, conn.WithInboundLimit(1<<20), conn.WithInboundBudget(budget))
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		small, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer small.Close()
		small.Write([]byte("short, no newline yet"))
		// Four peers of 200 KiB each, without a newline: 800 KiB in all,
		// each under its own limit.
		var wg sync.WaitGroup
		var peers []net.Conn
		for range 4 {
			nc, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			peers = append(peers, nc)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 50 {
					if _, err := nc.Write(bytes.Repeat([]byte("y"), 4<<10)); err != nil {
						return // reset by the budget
					}
				}
			}()
		}
		wg.Wait()
		var errs []error
		for len(errs) == 0 || len(closed) > 0 {
			select {
			case err := <-closed:
				errs = append(errs, err)
			case <-time.After(10 * time.Second):
				t.Fatal("no connection was closed past the budget")
			}
		}
		for _, err := range errs {
			if !errors.Is(err, conn.ErrInboundLimit) {
				t.Errorf("OnClose %v, want ErrInboundLimit", err)
			}
		}
		if kept, _ := conn.KeptOnLoop(g.Loop(0)); kept > budget+256<<10 {
			t.Errorf("%d bytes kept on the loop, budget %d", kept, budget)
		}
		// The small connection still works.
		small.Write([]byte("\n"))
		small.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 8)
		if n, err := small.Read(buf); err != nil || string(buf[:n]) != "ok\n" {
			t.Errorf("the small connection: read %q, %v; want its answer", buf[:n], err)
		}
		t.Logf("%d connections closed past the budget", len(errs))
		small.Close()
		for _, nc := range peers {
			nc.Close()
		}
		ctWaitFor(t, 10*time.Second, "the loop's kept bytes back to 0", func() bool {
			kept, keepers := conn.KeptOnLoop(g.Loop(0))
			return kept == 0 && keepers == 0
		})
	})
}
