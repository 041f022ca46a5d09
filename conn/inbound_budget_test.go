package conn_test

import (
	"bytes"
	"errors"
	"net"
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

// TestInboundLimitDefault: with default options a line twice as long as
// DefaultInboundLimit closes its connection with ErrInboundLimit; with the
// limit raised the same line is answered. (The limit is on what the handler
// leaves unconsumed: a line a little longer than it may be answered if its
// end arrives in the same receive.)
func TestInboundLimitDefault(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		for _, raised := range []bool{false, true} {
			h := &lineKeeper{closed: make(chan error, 1)}
			var opts []conn.Option
			if raised {
				opts = append(opts, conn.WithInboundLimit(4*conn.DefaultInboundLimit))
			}
			srv, err := conn.ListenFunc(t.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler { return h }, opts...)
			if err != nil {
				t.Fatal(err)
			}
			nc, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			line := append(bytes.Repeat([]byte("x"), 2*conn.DefaultInboundLimit), '\n')
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

// TestKeptBudgetPausesStalledKeepers: connections that each hold part of a
// line and make no progress, together past their loop's budget of kept
// bytes, are paused when they send more, not reset; a connection sending
// a long line meanwhile is answered; once the stalled peers leave, the
// paused count and the loop's kept bytes go back to zero.
func TestKeptBudgetPausesStalledKeepers(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		const budget = 1 << 20
		g := ctGroup(t, b, 1, loop.WithBufferBudget(budget, 0))
		closed := make(chan error, 16)
		srv, err := conn.ListenFunc(t.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler {
			return &lineKeeper{closed: closed}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		// Four peers of 300 KiB each, without a newline: 1,200 KiB in all,
		// each under its own limit, the loop past its budget but under
		// twice it.
		var peers []net.Conn
		for range 4 {
			nc, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			peers = append(peers, nc)
			if _, err := nc.Write(bytes.Repeat([]byte("y"), 300<<10)); err != nil {
				t.Fatal(err)
			}
		}
		// Past the budget (a peer whose last bytes come late may be
		// paused before they do: the total need not reach 1,200 KiB).
		ctWaitFor(t, 10*time.Second, "the loop past its budget", func() bool {
			kept, _ := conn.KeptOnLoop(g.Loop(0))
			return kept > budget
		})
		// Each holds 300 KiB: a stall after about 21 ms without progress.
		time.Sleep(conn.KeptStallAge)
		for _, nc := range peers {
			nc.Write([]byte("y"))
		}
		ctWaitFor(t, 10*time.Second, "the four stalled peers paused", func() bool {
			return conn.BudgetPausedOnLoop(g.Loop(0)) == 4
		})
		// A long line from a new client goes through meanwhile.
		legit, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer legit.Close()
		go legit.Write(append(bytes.Repeat([]byte("z"), 100<<10), '\n'))
		legit.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 8)
		if n, err := legit.Read(buf); err != nil || string(buf[:n]) != "ok\n" {
			kept, keepers := conn.KeptOnLoop(g.Loop(0))
			t.Errorf("a long line past the budget: read %q, %v; want its answer (kept %d by %d, %d paused)", buf[:n], err, kept, keepers, conn.BudgetPausedOnLoop(g.Loop(0)))
		}
		ctNotClosed(t, closed, "a connection closed past the budget")
		// The peers leave with a reset: a FIN may wait behind bytes that
		// the paused connections' closed receive windows keep out (that
		// case is TestPausedPeerGoneCloses's, with room for the FIN).
		for _, nc := range peers {
			nc.(*net.TCPConn).SetLinger(0)
			nc.Close()
		}
		ctWaitFor(t, 10*time.Second, "nothing paused and no byte kept once the peers left", func() bool {
			kept, keepers := conn.KeptOnLoop(g.Loop(0))
			return kept == 0 && keepers == 0 && conn.BudgetPausedOnLoop(g.Loop(0)) == 0
		})
	})
}

// TestKeptBudgetCeiling: peers filling long frames as fast as they can,
// faster than they stall, pause once their loop keeps twice its budget,
// and none is reset.
func TestKeptBudgetCeiling(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		const budget = 256 << 10
		g := ctGroup(t, b, 1, loop.WithBufferBudget(budget, 0))
		closed := make(chan error, 16)
		srv, err := conn.ListenFunc(t.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler {
			return &lineKeeper{closed: closed}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		const peers, each = 8, 900 << 10
		for range peers {
			nc, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			go nc.Write(bytes.Repeat([]byte("y"), each)) // blocks where the server stops reading
		}
		ctWaitFor(t, 10*time.Second, "peers paused past twice the budget", func() bool {
			return conn.BudgetPausedOnLoop(g.Loop(0)) > 0
		})
		kept, _ := conn.KeptOnLoop(g.Loop(0))
		t.Logf("kept %d KiB of the %d KiB sent; %d connections paused", kept>>10, peers*each>>10, conn.BudgetPausedOnLoop(g.Loop(0)))
		if kept > peers*each/2 {
			t.Errorf("kept %d bytes of %d sent: the budget of %d did not stop them", kept, peers*each, budget)
		}
		ctNotClosed(t, closed, "a connection closed past the budget")
	})
}

// ctNotClosed fails t if a close was reported on closed (what: which).
func ctNotClosed(t *testing.T, closed <-chan error, what string) {
	t.Helper()
	select {
	case err := <-closed:
		t.Errorf("%s: %v", what, err)
	default:
	}
}
