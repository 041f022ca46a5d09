//go:build ringfault && linux

package conn_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testknobs"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// The fault-injection run (go test -tags ringfault -run TestFaultEcho
// ./conn/): an echo server on loops whose backends inject every rare path
// of loop's fault mode (fault_on.go) while clients stream through it. Every
// client sends its own pattern, a connection id and a sequence number in
// every 8 bytes, and checks every byte echoed back, so a byte lost,
// duplicated, reordered or delivered on another connection is caught at
// its offset. A connection may end early only with a reset caused by an
// injected fatal fault (the server side closed with an error); an orderly
// end before the last byte is a loss unless the client got every byte the
// server's handler wrote.
//
// RINGLOOP_FAULT_SEED=<n> repeats a run's fault choices (the threads'
// timing still varies); FAULTDEBUG=1 adds the kernel's view (ss -tinoe) of
// a connection that stalls.

const (
	faultConns     = 24
	faultRunBudget = 30 * time.Second
)

// faultBytes is what each connection streams each way: 4 MiB, or 256 KiB
// in short mode (the -race pass in CI).
var faultBytes uint64 = 4 << 20

// faultWord is the 8-byte word at index k of connection id's stream.
func faultWord(id uint32, k uint64) (w [8]byte) {
	binary.LittleEndian.PutUint32(w[0:4], id)
	binary.LittleEndian.PutUint32(w[4:8], uint32(k))
	return w
}

// faultExpect checks got, which starts at stream offset off, against
// connection id's pattern; it returns the offset of the first wrong byte,
// or -1.
func faultExpect(id uint32, off uint64, got []byte) int {
	for i := range got {
		p := off + uint64(i)
		w := faultWord(id, p/8)
		if got[i] != w[p%8] {
			return i
		}
	}
	return -1
}

// faultServer is an echo handler that records, by the client's address,
// how many bytes each connection wrote and how it ended.
type faultServer struct {
	mu      sync.Mutex
	closes  map[string]error
	written map[string]uint64
}

func (s *faultServer) OnOpen(c *conn.Conn) {}
func (s *faultServer) OnData(c *conn.Conn, data []byte) {
	if _, err := c.Write(data); err == nil {
		s.mu.Lock()
		s.written[c.RemoteAddr().String()] += uint64(len(data))
		s.mu.Unlock()
	}
}
func (s *faultServer) OnClose(c *conn.Conn, err error) {
	s.mu.Lock()
	s.closes[c.RemoteAddr().String()] = err
	s.mu.Unlock()
}

// faultClient is one client's outcome.
type faultClient struct {
	addr     string
	received uint64
	err      error // nil: the whole stream came back intact
	corrupt  string
	debug    string
}

// runFaultClient streams faultBytes of connection id's pattern through the
// server and checks the echo. It reads and writes from one goroutine, up
// to faultWindow bytes ahead, so the first error it sees is the one the
// connection ended with: a reset (ECONNRESET) or an orderly end (EOF) that
// no concurrent call consumed first.
func runFaultClient(ctx context.Context, id uint32, addr string, seed uint64) faultClient {
	const faultWindow = 64 << 10
	var out faultClient
	rng := rand.New(rand.NewPCG(seed, uint64(id)))
	slow := id%2 == 0
	// The socket is bound before it connects, so its address is known
	// even when the server resets it before the dial returns (a fatal
	// fault on the accepted connection's first op).
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			if slow {
				// A small receive window and pauses in reading keep
				// the server's sends queued in its socket, so sends
				// stay in flight across rebuilds.
				if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 16384); serr != nil {
					return
				}
			}
			if serr = unix.Bind(int(fd), &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); serr != nil {
				return
			}
			sa, err := unix.Getsockname(int(fd))
			if err != nil {
				serr = err
				return
			}
			out.addr = fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
		}); err != nil {
			return err
		}
		return serr
	}}
	nc, err := d.DialContext(ctx, "tcp4", addr)
	if err != nil {
		out.err = err
		return out
	}
	defer nc.Close()
	if got := nc.LocalAddr().String(); got != out.addr {
		out.err = fmt.Errorf("bound %s, connected from %s", out.addr, got)
		return out
	}
	deadline, _ := ctx.Deadline()
	nc.SetDeadline(deadline)

	wbuf := make([]byte, 0, 16<<10)
	rbuf := make([]byte, 32<<10)
	var sent uint64
	for out.received < faultBytes {
		for sent < faultBytes && sent-out.received < faultWindow {
			n := min(uint64(1+rng.IntN(12000)), faultBytes-sent)
			wbuf = wbuf[:0]
			for p := sent; p < sent+n; p++ {
				w := faultWord(id, p/8)
				wbuf = append(wbuf, w[p%8])
			}
			if _, err := nc.Write(wbuf); err != nil {
				out.err = err
				return out
			}
			sent += n
		}
		if slow && rng.IntN(64) == 0 {
			time.Sleep(time.Duration(1+rng.IntN(30)) * time.Millisecond)
		}
		n, err := nc.Read(rbuf)
		if i := faultExpect(id, out.received, rbuf[:n]); i >= 0 {
			p := out.received + uint64(i)
			var got [8]byte
			copy(got[:], rbuf[i:min(n, i+8)])
			out.corrupt = fmt.Sprintf("connection %d: wrong byte at offset %d (word %d): got % x, want % x",
				id, p, p/8, got, faultWord(id, p/8))
			out.err = errors.New("corrupt stream")
			return out
		}
		out.received += uint64(n)
		if err != nil {
			if out.received < faultBytes {
				out.err = err
			}
			if os.Getenv("FAULTDEBUG") != "" && errors.Is(err, os.ErrDeadlineExceeded) {
				port := nc.LocalAddr().(*net.TCPAddr).Port
				o, _ := exec.Command("ss", "-tinoe", "( sport = :"+fmt.Sprint(port)+" or dport = :"+fmt.Sprint(port)+" )").CombinedOutput()
				out.debug = fmt.Sprintf("sent %d received %d\n%s", sent, out.received, o)
			}
			return out
		}
	}
	return out
}

// faultSeed is the fault runs' seed: RINGLOOP_FAULT_SEED, or the clock.
// It is logged, so a failing run's fault choices can be repeated.
func faultSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("RINGLOOP_FAULT_SEED"); v != "" {
		if _, err := fmt.Sscan(v, &seed); err != nil {
			t.Fatalf("RINGLOOP_FAULT_SEED=%q: %v", v, err)
		}
	}
	t.Logf("fault seed %d (RINGLOOP_FAULT_SEED)", seed)
	return seed
}

// rebuildEvery asks g's loops to rebuild their rings every period until
// the returned stop is called (and returns), so that even a short run
// moves live traffic across rings.
func rebuildEvery(g *loop.Group, period time.Duration) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				testknobs.RebuildRings(g)
			}
		}
	}()
	return func() { close(quit); <-done }
}

type faultCase struct {
	name    string
	backend loop.Backend
}

func TestFaultEcho(t *testing.T) {
	cases := []faultCase{
		{"uring", loop.BackendUring},
		{"epoll", loop.BackendEpoll},
	}
	base := faultSeed(t)
	for i, fc := range cases {
		t.Run(fc.name, func(t *testing.T) { runFaultCase(t, fc, base+uint64(i)) })
	}
}

func runFaultCase(t *testing.T, fc faultCase, seed uint64) {
	if testing.Short() {
		faultBytes = 256 << 10
	}
	if fc.backend == loop.BackendUring {
		testutil.SkipIfNoUring(t)
	}
	testutil.CheckLeaks(t)
	testutil.Watchdog(t, 2*faultRunBudget)

	restore := loop.SetFaults(loop.Faults{
		Seed:           seed,
		ShortSend:      0.2,
		Retry:          0.03,
		NoBufs:         0.03,
		Cancel:         0.0001,
		BufOnFailure:   0.05,
		ReapOne:        0.05,
		Rebuild:        0.02,
		GiveUp:         0.003,
		RebuildTimeout: 20 * time.Millisecond,
		BufRingFail:    0.2,
	})
	before := loop.InjectedFaults()

	g, err := loop.NewGroup(loop.WithBackend(fc.backend), loop.WithLoops(2), loop.WithLogger(ctLogger),
		loop.WithRingEntries(16), loop.WithBufferRing(64, 4096))
	if err != nil {
		restore()
		t.Fatal(err)
	}
	qBefore := g.Stats().Total.ProcessQuarantinedBytes
	srvH := &faultServer{closes: map[string]error{}, written: map[string]uint64{}}
	opts := []conn.Option{conn.WithLinger(5 * time.Second)}
	srv, err := conn.Listen(context.Background(), g, "tcp4", "127.0.0.1:0", srvH, opts...)
	if err != nil {
		restore()
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), faultRunBudget)
	defer cancel()
	results := make([]faultClient, faultConns)
	var wg sync.WaitGroup
	for i := range faultConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runFaultClient(ctx, uint32(i+1), srv.Addr().String(), seed)
		}()
	}
	stopRebuilds := rebuildEvery(g, 100*time.Millisecond)
	wg.Wait()
	stopRebuilds()

	// Every server connection closes once its client is gone.
	ctWaitFor(t, 20*time.Second, "server connections to close", func() bool { return srv.Conns() == 0 })
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil {
		t.Errorf("server Shutdown: %v", err)
	}
	// Loops rebuild (and give ops up) until they terminate: read the
	// stats and the fault counts once they have.
	if err := g.Shutdown(sctx); err != nil {
		t.Errorf("group Shutdown: %v", err)
	}
	restore()
	stats := g.Stats().Total
	inj := loop.InjectedFaults()
	d := loop.FaultCounts{
		ShortSends: inj.ShortSends - before.ShortSends, Retries: inj.Retries - before.Retries,
		NoBufs: inj.NoBufs - before.NoBufs, Cancels: inj.Cancels - before.Cancels,
		BufsOnFailure: inj.BufsOnFailure - before.BufsOnFailure, ReapOnes: inj.ReapOnes - before.ReapOnes,
		Rebuilds: inj.Rebuilds - before.Rebuilds, GiveUps: inj.GiveUps - before.GiveUps,
		BufRingFails: inj.BufRingFails - before.BufRingFails,
	}

	complete, reset := 0, 0
	var moved uint64
	srvH.mu.Lock()
	defer srvH.mu.Unlock()
	for i, r := range results {
		moved += r.received
		switch {
		case r.corrupt != "":
			t.Error(r.corrupt)
		case r.err == nil:
			complete++
		case r.addr == "":
			t.Errorf("connection %d: dial: %v", i+1, r.err)
		default:
			// An early end must be a failure the server saw: a
			// connection it closed with an error, after an injected
			// fatal fault. Never an orderly end before the last byte.
			serr, seen := srvH.closes[r.addr]
			if !seen || serr == nil {
				t.Errorf("connection %d ended after %d of %d bytes (%v), but the server closed it without an error (seen %v): bytes lost",
					i+1, r.received, faultBytes, r.err, seen)
				continue
			}
			// An orderly end (not a reset) promises that every byte
			// the server's handler wrote arrived.
			if errors.Is(r.err, io.EOF) && r.received != srvH.written[r.addr] {
				t.Errorf("connection %d: orderly EOF after %d bytes, but the server wrote %d (server: %v): bytes lost without a reset",
					i+1, r.received, srvH.written[r.addr], serr)
			}
			if errors.Is(r.err, os.ErrDeadlineExceeded) {
				t.Errorf("connection %d: stalled after %d of %d bytes\n%s", i+1, r.received, faultBytes, r.debug)
			}
			reset++
		}
	}
	t.Logf("%s: %d connections complete, %d reset by injected fatal faults; %d bytes echoed and checked", fc.name, complete, reset, moved)
	t.Logf("faults injected: %+v", d)
	t.Logf("loops: %d rebuilds (%d failed), %d ops migrated, %d ops / %d bytes quarantined (process: %d bytes, +%d)",
		stats.Rebuilds, stats.RebuildFailures, stats.MigratedOps, stats.Quarantined, stats.QuarantinedBytes,
		stats.ProcessQuarantinedBytes, stats.ProcessQuarantinedBytes-qBefore)

	if stats.LostCompletions != 0 || stats.BufferMisuse != 0 || stats.StaleCompletions != 0 {
		t.Errorf("invariant breaks: %d completions lost, %d provided buffers misused, %d stale completions",
			stats.LostCompletions, stats.BufferMisuse, stats.StaleCompletions)
	}
	// Fatal: an injected -ECANCELED, or an op given up (injected, or
	// naturally past the short rebuild deadline).
	// Fatal: an injected -ECANCELED, or an op given up with its outcome
	// unknown (the server closed with loop.ErrGivenUp).
	givenUp := 0
	for _, err := range srvH.closes {
		if errors.Is(err, loop.ErrGivenUp) {
			givenUp++
		}
	}
	if fatal := d.Cancels + uint64(givenUp); uint64(reset) > fatal {
		t.Errorf("%d connections reset, but only %d fatal faults happened (%d injected cancels, %d give-ups with unknown outcome)",
			reset, fatal, d.Cancels, givenUp)
	}
	if complete < faultConns/2 {
		t.Errorf("only %d of %d connections completed: the run proves little", complete, faultConns)
	}
	if fc.backend == loop.BackendUring {
		// Each hidden completion gives its op up; ops the kernel did not
		// finish within the short deadline are given up too.
		if want := d.GiveUps; stats.Quarantined < want {
			t.Errorf("Stats: %d ops / %d bytes quarantined, want at least one op per give-up injected (%d)",
				stats.Quarantined, stats.QuarantinedBytes, want)
		}
		if stats.Rebuilds+stats.RebuildFailures == 0 || d.ShortSends == 0 {
			t.Errorf("faults not exercised: %+v, %d rebuilds", d, stats.Rebuilds+stats.RebuildFailures)
		}
	}
}

// TestFaultListenerSurvivesGiveUp: a rebuild that gives up the listener's
// accept (its final completion hidden past the deadline) is not a
// shutdown: the server accepts again after a pause.
func TestFaultListenerSurvivesGiveUp(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.CheckLeaks(t)
	testutil.Watchdog(t, 60*time.Second)
	g := ctGroup(t, loop.BackendUring, 1)
	srvH := &faultServer{closes: map[string]error{}, written: map[string]uint64{}}
	srv := ctListen(t, "tcp4", "127.0.0.1:0", g, srvH)
	echo := func(what string) {
		t.Helper()
		c, err := net.DialTimeout("tcp4", srv.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: dial: %v", what, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatalf("%s: write: %v", what, err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("%s: echo %q, %v", what, buf, err)
		}
	}
	echo("before the rebuild")

	restore := loop.SetFaults(loop.Faults{Seed: 1, GiveUp: 1, RebuildTimeout: 20 * time.Millisecond})
	l := g.Loop(0)
	before := l.Stats()
	if err := testknobs.RebuildRing(l); err != nil {
		restore()
		t.Fatal(err)
	}
	ctWaitFor(t, 5*time.Second, "the rebuild", func() bool { return l.Stats().Rebuilds > before.Rebuilds })
	restore()
	if s := l.Stats(); s.Quarantined == before.Quarantined {
		t.Fatalf("the rebuild gave nothing up (%d ops quarantined): the accept was not given up", s.Quarantined)
	}
	echo("after the accept was given up")
}
