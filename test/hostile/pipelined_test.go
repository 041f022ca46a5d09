package hostile

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// Peers that pipeline many requests in one segment and never read the
// answers: one receive asks for more answers than any outbound bound. The
// connection stops answering where its bound is reached and keeps the rest
// of the input, whether the handler watches writability or not, so such a
// peer costs the server about what it costs a package net server, whose
// goroutine blocks in Write.

// attackStop is the heap at which an attack stops early: the server under
// it does not bound what it queues.
const attackStop = 2 << 30

// canaryTrips is how many round trips the canary makes before an attack,
// and after the attack landed.
func canaryTrips() int { return scale(2000, 500) }

// memFigures is what an attack cost the process above its start, the
// peers' own cost subtracted.
type memFigures struct{ heap, rss uint64 }

func (m memFigures) String() string {
	return fmt.Sprintf("peak RSS +%s, peak heap +%s", mib(m.rss), mib(m.heap))
}

// pipelinedPeers dials n peers that each send lines newlines in one write
// (one segment) and never read. At most 64 of them wait for the server to
// see their bytes, and dialing stops early once the heap passes
// attackStop. It returns the peers, and whether it stopped early.
func pipelinedPeers(t *testing.T, addr string, n, lines int, seen func() int64) (peers []net.Conn, stopped bool) {
	t.Helper()
	d := ethernetDialer(4096)
	payload := bytes.Repeat([]byte("\n"), lines)
	for i := range n {
		if !testutil.Eventually(60*time.Second, func() bool { return seen() >= int64(i-64) || heapLive() > attackStop }) {
			t.Errorf("the server saw the bytes of %d of %d peers in 60 s", seen(), i)
			return peers, true
		}
		if h := heapLive(); h > attackStop {
			t.Errorf("the heap passed %s after %d of %d peers: the attack stops", mib(h), i, n)
			return peers, true
		}
		pc, err := d.Dial("tcp", addr)
		if err != nil {
			closeAll(peers)
			t.Fatalf("dial: %v", err)
		}
		peers = append(peers, pc)
		if _, err := pc.Write(payload); err != nil {
			closeAll(peers)
			t.Fatalf("peer write: %v", err)
		}
	}
	return peers, false
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// pipelinedCost measures what the peers of the attack cost the process
// on their own, against a server that accepts them and reads nothing.
func pipelinedCost(t *testing.T, n, lines int) memFigures {
	addr, accepted, stop := sinkServer(t)
	defer stop()
	w := watchMem(t)
	peers, _ := pipelinedPeers(t, addr, n, lines, func() int64 { return accepted.Load() })
	defer closeAll(peers)
	testutil.WaitFor(t, 60*time.Second, "the sink to accept every peer", func() bool { return accepted.Load() == int64(n) })
	heap, rss := w.end()
	return memFigures{heap, rss}
}

// pipelinedRun is one server's figures under the attack.
type pipelinedRun struct {
	mem     memFigures
	p99     time.Duration
	trips   int
	err     error // the canary's
	stopped bool
}

// runPipelined attacks a line server of kind k with n pipelining peers
// while a canary does round trips, and returns the figures, the peers'
// cost subtracted.
func runPipelined(t *testing.T, k lineKind, b loop.Backend, n, lines int, peersCost memFigures) pipelinedRun {
	t.Helper()
	ls := startLines(t, k, b)
	w := watchMem(t)
	can := startCanary(t, ls.addr)
	can.idle(t, canaryTrips())
	start := time.Now()
	peers, stopped := pipelinedPeers(t, ls.addr, n, lines, func() int64 { return ls.stats.seen.Load() - 1 })
	// Once the server saw every peer's lines, the canary goes on for a
	// number of round trips, while the attack holds.
	if !stopped && !testutil.Eventually(60*time.Second, func() bool { return ls.stats.seen.Load() == int64(len(peers))+1 }) {
		t.Errorf("the server saw the bytes of %d of %d peers", ls.stats.seen.Load()-1, len(peers))
	}
	landed := time.Since(start)
	p99, idleP99, trips, err := can.finish(canaryTrips())
	heap, rss := w.end()
	r := pipelinedRun{mem: memFigures{sub(heap, peersCost.heap), sub(rss, peersCost.rss)}, p99: p99, trips: trips, err: err, stopped: stopped}
	t.Logf("%v: %d peers × %d newlines landed in %v; %s; canary p99 %v over %d round trips (err %v; %v before the attack); %d lines answered, largest outbound queue %d KiB; connections closed: %v",
		k, len(peers), lines, landed.Round(time.Millisecond), r.mem, p99, trips, err, idleP99, ls.stats.answered.Load(), ls.stats.peakQueued.Load()>>10, ls.stats.closeCauses())
	closeAll(peers)
	ls.close(t)
	return r
}

// TestPipelinedAnswersPauseWithinReceive: 1,000 peers each send 1,000
// newlines in one segment to a line server that answers each line with
// 4 KiB, and never read: 4 MB of answers asked for by one receive, per
// connection. Answering stops where the connection's outbound bound is
// reached and the rest of the input waits, even inside one receive, so the
// server's peak memory stays within 1.5 times what a package net server
// running the same logic takes, a legitimate client's p99 round trip
// within twice its figure there, and the legitimate client is never reset.
// On the callback API, both for a ReadHandler that stops consuming while
// unwritable and for a naive OnData handler that answers every newline it
// is given; and for the same goroutine-per-connection code on the adapter
// (conn.ListenNet on a shared-thread group).
func TestPipelinedAnswersPauseWithinReceive(t *testing.T) {
	n := scale(1000, 200)
	const lines = 1000
	if lim := raiseNoFile(t); lim < uint64(2*n+256) {
		t.Skipf("RLIMIT_NOFILE %d is below the %d fds the attack needs", lim, 2*n+256)
	}
	testutil.Watchdog(t, 20*time.Minute)
	peersCost := pipelinedCost(t, n, lines)
	t.Logf("the peers alone: %s", peersCost)
	ref := runPipelined(t, kindNet, 0, n, lines, peersCost)
	if ref.err != nil || ref.stopped {
		t.Fatalf("package net under the attack: canary %v, stopped early %v", ref.err, ref.stopped)
	}
	for _, k := range []lineKind{kindReadHandler, kindOnData, kindAdapter} {
		t.Run(k.String(), func(t *testing.T) {
			backends(t, func(t *testing.T, b loop.Backend) {
				r := runPipelined(t, k, b, n, lines, peersCost)
				// With the loop's queued budget of 1 MiB the ReadHandler
				// stays well inside the bound (+12 to +14 MiB against
				// package net's +10 to +12, bound 24 to 26; +5 to +6
				// against 11 at the short scale): asserted, except
				// under the race detector, whose shadow memory
				// multiplies the heap touched. The naive OnData server
				// (+17 to +20) answers one connection's whole receive
				// at once (4 MB queued), which the short scale does not
				// absorb, and the adapter (+22 to +25) comes within a
				// MiB or two of the bound: logged.
				checkAgainstNet(t, r.mem, ref.mem, k == kindReadHandler && !raceOn)
				if r.err != nil {
					t.Errorf("the canary failed: %v", r.err)
				}
				// Twice package net's p99, and 200 µs of scheduling noise
				// on a shared machine. The race detector slows the two
				// servers' code by different factors (package net's p99
				// grows tenfold under it): there the figures are only
				// logged.
				if bound := 2*ref.p99 + 200*time.Microsecond; r.p99 > bound && !raceOn {
					missed(t, false, "canary p99 %v: more than %v, twice package net's %v", r.p99, bound, ref.p99)
				}
			})
		})
	}
}

// checkAgainstNet fails t (if strict, or in an acceptance run) if the
// attack's peak RSS is more than 1.5 times package net's under the same
// attack, and 8 MiB: the resident set moves by a few MiB between identical
// runs (three times that under the race detector, whose shadow memory
// grows with the heap touched).
func checkAgainstNet(t *testing.T, got, ref memFigures, strict bool) {
	t.Helper()
	_, slack := raceScaled(0, 8<<20)
	bound := ref.rss*3/2 + slack
	t.Logf("%s against package net's %s", got, ref)
	if got.rss > bound {
		missed(t, strict, "peak RSS +%s: more than %s, 1.5 times package net's +%s (and %s)", mib(got.rss), mib(bound), mib(ref.rss), mib(slack))
	}
}
