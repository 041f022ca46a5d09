package hostile

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// Many peers that each hold part of a line, under the per-connection
// inbound limit, while legitimate clients send long lines. Together the
// held lines pass the group's inbound budget: the loop bounds its total by
// pausing the connections that cost most for least progress, and resets
// nobody for it. Every legitimate line is answered.

// heldPeers dials n peers that each send held bytes of a line without
// its newline, and then wait.
func heldPeers(t *testing.T, addr string, n, held int) []net.Conn {
	t.Helper()
	d := ethernetDialer(0)
	partial := bytes.Repeat([]byte("z"), held)
	peers := make([]net.Conn, 0, n)
	for range n {
		pc, err := d.Dial("tcp", addr)
		if err != nil {
			closeAll(peers)
			t.Fatalf("dial: %v", err)
		}
		peers = append(peers, pc)
		pc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := pc.Write(partial); err != nil {
			closeAll(peers)
			t.Fatalf("peer write: %v", err)
		}
	}
	return peers
}

// heldCost measures what the peers cost the process on their own, against
// a server that accepts them and reads nothing.
func heldCost(t *testing.T, n, held int) memFigures {
	addr, accepted, stop := sinkServer(t)
	defer stop()
	w := watchMem(t)
	peers := heldPeers(t, addr, n, held)
	defer closeAll(peers)
	testutil.WaitFor(t, 60*time.Second, "the sink to accept every peer", func() bool { return accepted.Load() == int64(n) })
	heap, rss := w.end()
	return memFigures{heap, rss}
}

// legitLines runs clients that each send lines of size bytes (the newline
// included) in 8 KiB writes, as they arrive from a network, and read each
// answer. It returns how many were answered, and the failures.
func legitLines(addr string, clients, lines, size int) (answered int, failed []string) {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		got atomic.Int64
	)
	line := bytes.Repeat([]byte("l"), size)
	line[size-1] = '\n'
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(format string, args ...any) {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("client %d: ", i)+fmt.Sprintf(format, args...))
				mu.Unlock()
			}
			c, err := ethernetDialer(0).Dial("tcp", addr)
			if err != nil {
				fail("dial: %v", err)
				return
			}
			defer c.Close()
			answer := make([]byte, len(reply4K))
			for j := range lines {
				// A generous bound on one line: a stall fails it.
				c.SetDeadline(time.Now().Add(60 * time.Second))
				for off := 0; off < size; off += 8 << 10 {
					if _, err := c.Write(line[off:min(off+8<<10, size)]); err != nil {
						fail("line %d: write: %v", j, err)
						return
					}
				}
				if _, err := io.ReadFull(c, answer); err != nil {
					fail("line %d: no answer: %v", j, err)
					return
				}
				got.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(got.Load()), failed
}

// heldRun is one server's figures under the attack.
type heldRun struct {
	mem           memFigures
	answered      int
	failed        []string
	peersEnded    map[string]int // how attacking peers found their connection ended
	peersEndedAll int
}

// runHeld attacks a line server of kind k with n peers holding held bytes
// of a line each, then runs the legitimate clients, and returns the
// figures, the peers' cost subtracted.
func runHeld(t *testing.T, k lineKind, b loop.Backend, n, held int, peersCost memFigures) heldRun {
	t.Helper()
	ls := startLines(t, k, b)
	w := watchMem(t)
	peers := heldPeers(t, ls.addr, n, held)
	if !testutil.Eventually(60*time.Second, func() bool { return ls.stats.opened.Load() >= int64(n) }) {
		t.Errorf("the server accepted %d of %d peers", ls.stats.opened.Load(), n)
	}
	clients, lines := scale(8, 4), scale(40, 10)
	answered, failed := legitLines(ls.addr, clients, lines, 24<<10)
	r := heldRun{answered: answered, failed: failed, peersEnded: map[string]int{}}
	for _, pc := range peers {
		if s := peerState(pc); s != "" {
			r.peersEnded[s]++
			r.peersEndedAll++
		}
	}
	heap, rss := w.end()
	r.mem = memFigures{sub(heap, peersCost.heap), sub(rss, peersCost.rss)}
	t.Logf("%v: %d peers holding %d bytes each (%d MB); %d of %d legitimate 24 KiB lines answered; %s; peers whose connection ended: %v; the server's connections closed: %v",
		k, len(peers), held, len(peers)*held/1e6, answered, clients*lines, r.mem, r.peersEnded, ls.stats.closeCauses())
	for i, f := range failed {
		if i == 5 {
			t.Logf("and %d more failures", len(failed)-5)
			break
		}
		t.Log(f)
	}
	closeAll(peers)
	ls.close(t)
	return r
}

// TestInboundTotalPausesNeverResets: 9,000 peers each hold 8 KiB of a
// line without its newline (72 MB, past the group's inbound budget, each
// under its own inbound limit), while legitimate clients send 24 KiB lines
// and read the answers. The total is bounded by pausing, not by resets:
// every legitimate line is answered, no connection is reset, and the
// server's peak memory stays within 1.5 times what a package net server
// running the same logic takes. On the callback API (a ReadHandler), and
// for the same goroutine-per-connection code on the adapter
// (conn.ListenNet on a shared-thread group).
func TestInboundTotalPausesNeverResets(t *testing.T) {
	n := scale(9000, 1500)
	const held = 8 << 10
	if lim := raiseNoFile(t); lim < uint64(2*n+256) {
		t.Skipf("RLIMIT_NOFILE %d is below the %d fds the attack needs", lim, 2*n+256)
	}
	testutil.Watchdog(t, 20*time.Minute)
	peersCost := heldCost(t, n, held)
	t.Logf("the peers alone: %s", peersCost)
	ref := runHeld(t, kindNet, 0, n, held, peersCost)
	if len(ref.failed) > 0 || ref.peersEndedAll > 0 {
		t.Fatalf("package net under the attack: %d legitimate lines failed, %d peers ended", len(ref.failed), ref.peersEndedAll)
	}
	for _, k := range []lineKind{kindReadHandler, kindAdapter} {
		t.Run(k.String(), func(t *testing.T) {
			backends(t, func(t *testing.T, b loop.Backend) {
				r := runHeld(t, k, b, n, held, peersCost)
				checkAgainstNet(t, r.mem, ref.mem, true)
				if len(r.failed) > 0 {
					t.Errorf("%d legitimate clients failed (%d lines answered), the first: %s", len(r.failed), r.answered, r.failed[0])
				}
				if r.peersEndedAll > 0 {
					t.Errorf("%d of %d peers, each under its inbound limit, found their connection ended: %v", r.peersEndedAll, n, r.peersEnded)
				}
			})
		})
	}
}
