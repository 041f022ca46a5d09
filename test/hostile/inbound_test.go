package hostile

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// Peers of a line protocol that send bytes and never the newline. Each
// connection keeps at most DefaultInboundLimit, and past its loop's budget
// of kept bytes (loop.DefaultKeptBudget) a connection that holds bytes
// without progress stops being read, so the server's memory stays bounded
// however many such peers come, and none is reset for it.

// scanLines is a per-connection line handler that scans each byte once
// and answers each line with "ok".
type scanLines struct {
	scanned int
	closed  *atomic.Int32
}

func (h *scanLines) OnOpen(*conn.Conn)         {}
func (h *scanLines) OnData(*conn.Conn, []byte) {}
func (h *scanLines) OnClose(*conn.Conn, error) { h.closed.Add(1) }
func (h *scanLines) OnRead(c *conn.Conn, data []byte) int {
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

// raiseNoFile raises the fd limit to its hard limit and returns it.
func raiseNoFile(t *testing.T) uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < lim.Max {
		old := lim.Cur
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			lim.Cur = old
			syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		})
	}
	return lim.Cur
}

// TestInboundLinesWithoutEnd: many peers send 1 KiB every 10 ms to a line
// server and never a newline. The server's heap stays within its loops'
// budgets of kept bytes plus each connection's own cost, and a peer that
// sends a short line still gets its answer meanwhile.
func TestInboundLinesWithoutEnd(t *testing.T) {
	n := scale(5000, 500)
	if lim := raiseNoFile(t); lim < uint64(2*n+256) {
		t.Skipf("RLIMIT_NOFILE %d is below the %d fds the attack needs", lim, 2*n+256)
	}
	dur := time.Duration(scale(10, 3)) * time.Second
	backends(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, 2)
		var closed atomic.Int32
		srv, err := conn.ListenFunc(t.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler {
			return &scanLines{closed: &closed}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		addr := srv.Addr().String()
		w := watchMem(t)
		stop := time.Now().Add(dur)
		chunk := bytes.Repeat([]byte("z"), 1<<10)
		var wg sync.WaitGroup
		var dialed, failed, reset atomic.Int32
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					failed.Add(1)
					return
				}
				defer nc.Close()
				dialed.Add(1)
				for time.Now().Before(stop) {
					nc.SetWriteDeadline(stop)
					if _, err := nc.Write(chunk); err != nil {
						reset.Add(1) // reset, or stalled past the write deadline
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
		// A legit peer meanwhile, once every attacker connected (or
		// failed to).
		testutil.WaitFor(t, dur+10*time.Second, "the attackers to connect", func() bool { return dialed.Load()+failed.Load() == int32(n) })
		lc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		lc.SetDeadline(time.Now().Add(10 * time.Second))
		lc.Write([]byte("hello\n"))
		buf := make([]byte, 8)
		if k, err := lc.Read(buf); err != nil || string(buf[:k]) != "ok\n" {
			t.Errorf("a short line during the attack: read %q, %v; want its answer", buf[:k], err)
		}
		lc.Close()
		wg.Wait()
		// The loops' budgets up to twice over (past it the loops pause
		// every connection that grows without progress and stop
		// accepting), what each connection took in its first receive
		// before it could be paused (up to a bundle, 16 KiB, with its
		// buffer's slack), and what each costs apart from its kept bytes
		// (the peer's goroutine and net.Conn included). The heap sampled
		// includes garbage not yet collected, up to as much again as is
		// live (GOGC=100).
		live := uint64(2*2*loop.DefaultKeptBudget) + uint64(n)*(24<<10+12<<10)
		w.check(t, "lines without an end", 2*live+16<<20, 2*live+rssSlack)
		t.Logf("%d peers connected, %d reset or stalled, %d connections closed", dialed.Load(), reset.Load(), closed.Load())
	})
}
