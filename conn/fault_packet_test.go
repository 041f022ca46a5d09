//go:build ringfault && linux

package conn_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// The datagram fault run (go test -tags ringfault -run TestFaultPacketEcho
// ./conn/): a ListenPacket echo server on loops that inject the rare paths
// of loop's fault mode into its receives and sends (fake -EAGAIN, -EINTR,
// -ENOBUFS and cancels, buffers posted with failures, CQ overflow, ring
// rebuilds, give-ups) while clients send numbered datagrams through it.
// Every echo is checked byte for byte against the datagram its number
// names; a duplicate, an altered datagram or a stale buffer's bytes fail
// the run. Datagrams may come back out of order, and one may be lost only
// where the server reports the loss (a receive or send given up with its
// outcome unknown, a send it could not hand over) or the kernel counts a
// drop: a silent loss fails the run.

const (
	faultDgramClients = 6
	faultDgramWindow  = 16
	faultDgramQuiet   = 400 * time.Millisecond // a burst's echoes: this long without one ends the wait
)

// faultDgramCount is what each client sends: 20,000 datagrams, or 2,000 in
// short mode (the -race pass in CI).
func faultDgramCount() int {
	if testing.Short() {
		return 2_000
	}
	return 20_000
}

// faultDgram is datagram seq of client id: its number in the first 8
// bytes, then 1 to 1,464 bytes that follow from (id, seq).
func faultDgram(b []byte, id, seq uint32) []byte {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(seq)))
	n := 8 + 1 + rng.IntN(1464)
	b = b[:n]
	binary.LittleEndian.PutUint32(b[0:4], id)
	binary.LittleEndian.PutUint32(b[4:8], seq)
	for j := 8; j < n; j++ {
		b[j] = byte(rng.Uint32())
	}
	return b
}

// faultDgramClient is one client's outcome.
type faultDgramClient struct {
	sent, echoed, late, missing int
	drops                       uint32 // the kernel's drop count for the client's socket
	err                         error  // an altered or duplicated datagram, or a socket error
}

// runFaultDgramClient sends count datagrams in bursts of faultDgramWindow
// and waits for each burst's echoes until faultDgramQuiet passes without
// one; echoes of earlier bursts are still taken (late). Whatever has not
// come back by the end is missing.
func runFaultDgramClient(ctx context.Context, id uint32, count int, srv *net.UDPAddr) (out faultDgramClient) {
	c, err := net.DialUDP("udp4", nil, srv)
	if err != nil {
		out.err = err
		return out
	}
	defer c.Close()
	c.SetReadBuffer(4 << 20)
	c.SetWriteBuffer(4 << 20)
	defer func() {
		if rc, err := c.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { out.drops, _ = sock.SocketDrops(int(fd)) })
		}
	}()
	seen := make([]bool, count)
	buf := make([]byte, 2048)
	want := make([]byte, 2048)
	in := make([]byte, 2048)
	// take reads one echo; it reports false when the quiet time passed.
	take := func(base int) bool {
		c.SetReadDeadline(time.Now().Add(faultDgramQuiet))
		n, err := c.Read(in)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				out.err = fmt.Errorf("read: %w", err)
			}
			return false
		}
		if n < 8 || binary.LittleEndian.Uint32(in[0:4]) != id {
			out.err = fmt.Errorf("an echo of %d bytes that is not this client's: % x", n, in[:min(n, 8)])
			return false
		}
		seq := binary.LittleEndian.Uint32(in[4:8])
		switch {
		case int(seq) >= out.sent:
			out.err = fmt.Errorf("echo of datagram %d, never sent (%d sent)", seq, out.sent)
		case seen[seq]:
			out.err = fmt.Errorf("datagram %d echoed twice", seq)
		case !bytes.Equal(in[:n], faultDgram(want, id, seq)):
			out.err = fmt.Errorf("datagram %d altered: %d bytes, want %d (%s)", seq, n, len(faultDgram(want, id, seq)), dgramDiff(in[:n], faultDgram(want, id, seq)))
		}
		if out.err != nil {
			return false
		}
		seen[seq] = true
		out.echoed++
		if int(seq) < base {
			out.late++
		}
		return true
	}
	for base := 0; base < count && ctx.Err() == nil; base += faultDgramWindow {
		end := min(base+faultDgramWindow, count)
		for seq := base; seq < end; seq++ {
			if _, err := c.Write(faultDgram(buf, id, uint32(seq))); err != nil {
				out.err = fmt.Errorf("write %d: %w", seq, err)
				return out
			}
			out.sent++
		}
		waiting := func() bool {
			for seq := base; seq < end; seq++ {
				if !seen[seq] {
					return true
				}
			}
			return false
		}
		for waiting() && take(base) {
		}
		if out.err != nil {
			return out
		}
	}
	// The last stragglers.
	for out.echoed < out.sent && take(count) {
	}
	out.missing = out.sent - out.echoed
	return out
}

// faultDgramServer echoes and keeps the errors the socket reports.
type faultDgramServer struct {
	mu   sync.Mutex
	errs []error
}

func (s *faultDgramServer) OnPacket(pc *conn.PacketConn, data []byte, from conn.Addr) {
	if _, err := pc.WriteToAddr(data, from); err != nil {
		s.OnPacketError(pc, err)
	}
}

func (s *faultDgramServer) OnPacketError(pc *conn.PacketConn, err error) {
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
}

func TestFaultPacketEcho(t *testing.T) {
	base := faultSeed(t)
	i := uint64(0)
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		i++
		runFaultPacketCase(t, b, base+i, opts)
	})
}

func runFaultPacketCase(t *testing.T, b loop.Backend, seed uint64, opts []loop.Option) {
	testutil.CheckLeaks(t)
	restore := loop.SetFaults(loop.Faults{
		Seed:           seed,
		Retry:          0.03,
		NoBufs:         0.03,
		Cancel:         0.002,
		BufOnFailure:   0.05,
		ReapOne:        0.05,
		Rebuild:        0.02,
		GiveUp:         0.01,
		RebuildTimeout: 20 * time.Millisecond,
		BufRingFail:    0.2,
	})
	before := loop.InjectedFaults()
	g, err := loop.NewGroup(append([]loop.Option{loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(ctLogger),
		loop.WithRingEntries(16), loop.WithDatagramBuffers(64, 2048)}, opts...)...)
	if err != nil {
		restore()
		t.Fatal(err)
	}
	h := &faultDgramServer{}
	srv, err := conn.ListenPacket(context.Background(), g, "udp4", "127.0.0.1:0", h,
		conn.WithReadBuffer(4<<20), conn.WithWriteBuffer(4<<20))
	if err != nil {
		restore()
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	count := faultDgramCount()
	results := make([]faultDgramClient, faultDgramClients)
	var wg sync.WaitGroup
	for id := range faultDgramClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[id] = runFaultDgramClient(ctx, uint32(id+1), count, srv.LocalAddr().(*net.UDPAddr))
		}()
	}
	stopRebuilds := rebuildEvery(g, 100*time.Millisecond)
	wg.Wait()
	stopRebuilds()
	st := srv.Stats()
	srv.Close()
	<-srv.Done()
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if err := g.Shutdown(sctx); err != nil {
		t.Errorf("group Shutdown: %v", err)
	}
	restore()
	inj := loop.InjectedFaults()
	stats := g.Stats().Total

	// Losses the server reported: operations given up with their outcome
	// unknown, sends it could not hand over.
	reported := st.ReadErrors + st.WriteErrors
	h.mu.Lock()
	errs := append([]error(nil), h.errs...)
	h.mu.Unlock()
	for _, err := range errs {
		var de *conn.DatagramError
		if !errors.As(err, &de) || !errors.Is(err, loop.ErrGivenUp) {
			t.Errorf("server error other than a give-up: %v", err)
		}
	}
	var sent, echoed, late, missing int
	drops := uint64(st.KernelDrops)
	for id, r := range results {
		if r.err != nil {
			t.Errorf("client %d: %v", id+1, r.err)
		}
		sent += r.sent
		echoed += r.echoed
		late += r.late
		missing += r.missing
		drops += uint64(r.drops)
	}
	t.Logf("%d datagrams sent, %d echoed and checked (%d after their burst's wait), %d missing; server %+v, %d errors reported; kernel drops %d",
		sent, echoed, late, missing, st, len(errs), drops)
	t.Logf("faults injected: retries %d, no-bufs %d, cancels %d, bufs on failure %d, reap-ones %d, rebuilds %d, give-ups %d, buffer-ring failures %d",
		inj.Retries-before.Retries, inj.NoBufs-before.NoBufs, inj.Cancels-before.Cancels, inj.BufsOnFailure-before.BufsOnFailure,
		inj.ReapOnes-before.ReapOnes, inj.Rebuilds-before.Rebuilds, inj.GiveUps-before.GiveUps, inj.BufRingFails-before.BufRingFails)
	t.Logf("loop: %d rebuilds (%d failed), %d ops migrated, %d quarantined", stats.Rebuilds, stats.RebuildFailures, stats.MigratedOps, stats.Quarantined)

	if sent != faultDgramClients*count {
		t.Errorf("%d datagrams sent, want %d", sent, faultDgramClients*count)
	}
	if uint64(missing) > reported+drops {
		t.Errorf("%d datagrams missing, but only %d losses were reported (%d read, %d write errors) and the kernel dropped %d: a silent loss",
			missing, reported, st.ReadErrors, st.WriteErrors, drops)
	}
	if stats.LostCompletions != 0 || stats.BufferMisuse != 0 || stats.StaleCompletions != 0 {
		t.Errorf("invariant breaks: %d completions lost, %d provided buffers misused, %d stale completions",
			stats.LostCompletions, stats.BufferMisuse, stats.StaleCompletions)
	}
	if inj.Retries == before.Retries || inj.Cancels == before.Cancels || stats.Rebuilds+stats.RebuildFailures == 0 {
		t.Errorf("faults not exercised: %d retries, %d cancels, %d rebuilds", inj.Retries-before.Retries, inj.Cancels-before.Cancels, stats.Rebuilds+stats.RebuildFailures)
	}
	if b == loop.BackendUring && inj.NoBufs == before.NoBufs {
		t.Errorf("no -ENOBUFS injected into the receive")
	}
}
