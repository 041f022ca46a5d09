//go:build linux

package conn_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testknobs"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// Tests of buffers shared with the kernel (docs/op-lifecycle.md, "Memory
// and the kernel's final word"): a chunk the kernel may still read never
// goes back to the pool, whatever happens to its connection.

// ctSlowPeers listens on loopback with a small receive buffer (inherited by
// accepted sockets), so a peer that does not read closes its window after a
// few KiB. Accepted connections arrive on the returned channel.
func ctSlowPeers(t *testing.T) (addr string, peers <-chan net.Conn) {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 2048)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan net.Conn, 8)
	go func() {
		defer close(ch)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range ch {
			c.Close()
		}
	})
	return ln.Addr().String(), ch
}

func ctAccept(t *testing.T, peers <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-peers:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

// ctReadFor reads from c until it has n bytes, an error, or d passed.
func ctReadFor(c net.Conn, n int, d time.Duration) ([]byte, error) {
	c.SetReadDeadline(time.Now().Add(d))
	var got []byte
	buf := make([]byte, 64<<10)
	for len(got) < n {
		k, err := c.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// zcScenario is the setup the SEND_ZC ownership tests share: on a
// one-loop uring group, connection A has sent n bytes of 'A' with SEND_ZC
// to a peer that does not read, so the send's result came and its
// notification is due; connection B, on the same loop, is idle. lingerA is
// A's WithLinger.
type zcScenario struct {
	g            *loop.Group
	l            *loop.Loop
	a, b         *conn.Conn
	evA, evB     *ctEvents
	peerA, peerB net.Conn
	dataA, dataB []byte
}

const zcBytes = 8 << 10

func newZCScenario(t *testing.T, g *loop.Group, lingerA time.Duration) *zcScenario {
	t.Helper()
	if !g.Features().SendZC {
		t.Skip("no SEND_ZC (6.0)")
	}
	addr, peers := ctSlowPeers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	z := &zcScenario{g: g, l: g.Loop(0), evA: ctNewEvents(t), evB: ctNewEvents(t),
		dataA: bytes.Repeat([]byte{'A'}, zcBytes), dataB: bytes.Repeat([]byte{'B'}, zcBytes)}
	var err error
	if z.a, err = conn.Dial(ctx, g, "tcp", addr, z.evA, conn.WithSendZCThreshold(1), conn.WithLinger(lingerA)); err != nil {
		t.Fatal(err)
	}
	z.peerA = ctAccept(t, peers)
	if z.b, err = conn.Dial(ctx, g, "tcp", addr, z.evB, conn.WithSendZCThreshold(1), conn.WithLinger(0)); err != nil {
		t.Fatal(err)
	}
	z.peerB = ctAccept(t, peers)
	if _, err := z.a.Write(z.dataA); err != nil {
		t.Fatal(err)
	}
	// The result comes at once; the notification waits for the peer to
	// read (its window is closed): the chunk stays queued until then.
	time.Sleep(200 * time.Millisecond)
	if z.a.Buffered() != zcBytes {
		t.Skipf("the SEND_ZC notification came without the peer reading (buffered %d): the scenario needs a closed window", z.a.Buffered())
	}
	return z
}

// writeBOnLoop writes B's bytes from the loop, where a chunk A gave back to
// the pool would be reused, and checks that B's peer gets them.
func (z *zcScenario) writeBOnLoop(t *testing.T) {
	t.Helper()
	done := make(chan error, 1)
	if err := z.l.Execute(func() { _, err := z.b.Write(z.dataB); done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, err := ctReadFor(z.peerB, zcBytes, 5*time.Second); !bytes.Equal(got, z.dataB) {
		t.Fatalf("B's peer got %d bytes (%v), want B's %d", len(got), err, zcBytes)
	}
}

// TestSendZCGivenUpAtRebuildKeepsItsChunk: connection A sends with SEND_ZC
// to a peer that does not read, so the send's result arrives but its
// notification does not. A ring rebuild cannot cancel a notification and
// gives up on it at its deadline. The chunk A sent must stay out of the
// pool for good: connection B, writing on the same loop right after, must
// not get it, and A's peer, once it reads, must receive A's bytes only.
func TestSendZCGivenUpAtRebuildKeepsItsChunk(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.Watchdog(t, 60*time.Second)
	z := newZCScenario(t, ctGroup(t, loop.BackendUring, 1), 0)
	l, a := z.l, z.a
	before := l.Stats()
	if err := l.RebuildRing(); err != nil {
		t.Fatal(err)
	}
	ctWaitFor(t, 10*time.Second, "the rebuild", func() bool { return l.Stats().Rebuilds > before.Rebuilds })
	z.writeBOnLoop(t)

	// A window closed this long reopens at the next zero-window probe,
	// which TCP's backoff may put seconds away.
	got, err := ctReadFor(z.peerA, zcBytes, 15*time.Second)
	if i := bytes.IndexFunc(got, func(r rune) bool { return r != 'A' }); i >= 0 {
		t.Fatalf("A's peer received a byte that A never wrote at offset %d of %d (%q…): another connection's data", i, len(got), got[i:min(len(got), i+16)])
	}
	switch {
	case len(got) == zcBytes:
		// A's stream is intact: its result was known before the
		// rebuild, so A goes on.
	case err != nil && !os.IsTimeout(err):
		t.Logf("A's peer: %d bytes, then %v (a clean failure)", len(got), err)
	default:
		t.Fatalf("A's peer received %d of %d bytes, then %v (A: %d bytes buffered; loop: %+v)", len(got), zcBytes, err, a.Buffered(), l.Stats())
	}
	s := l.Stats()
	if s.Quarantined == 0 || s.QuarantinedBytes < zcBytes {
		t.Fatalf("Stats: %d ops and %d bytes quarantined, want the SEND_ZC's %d bytes", s.Quarantined, s.QuarantinedBytes, zcBytes)
	}
	t.Logf("quarantined: %d ops, %d bytes", s.Quarantined, s.QuarantinedBytes)
	a.Close()
	z.b.Close()
	z.evA.wait(t)
	z.evB.wait(t)
}

// TestCloseWithSendZCNotificationDue: Close must finish while a SEND_ZC
// waits for its notification and the peer stays alive without reading.
// The fd closes (the kernel keeps delivering the queued bytes) and only
// the chunk waits for the notification, out of the pool: a connection
// writing on the same loop afterwards must not get it, and A's peer must
// read A's bytes, then EOF.
func TestCloseWithSendZCNotificationDue(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.Watchdog(t, 60*time.Second)
	z := newZCScenario(t, ctGroup(t, loop.BackendUring, 1), 100*time.Millisecond)
	z.a.Close()
	select {
	case <-z.evA.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not finish within 5 s while the SEND_ZC notification was due (the linger is 100 ms)")
	}
	if err := z.evA.wait(t); err != nil {
		t.Fatalf("OnClose(%v), want nil", err)
	}
	z.writeBOnLoop(t)
	got, err := ctReadFor(z.peerA, zcBytes+1, 15*time.Second)
	if !bytes.Equal(got, z.dataA) || err == nil || os.IsTimeout(err) {
		i := bytes.IndexFunc(got, func(r rune) bool { return r != 'A' })
		t.Fatalf("A's peer read %d bytes (first foreign byte at %d), then %v; want A's %d bytes, then EOF", len(got), i, err, zcBytes)
	}
	z.b.Close()
	z.evB.wait(t)
}

// TestShutdownWithSendZCNotificationDue: a group shut down while a SEND_ZC
// waits for a notification that a peer with a closed window holds back:
// the drain gives the op up at its deadline, quarantines its chunk (counted
// in Stats), and the connection still closes with OnClose.
func TestShutdownWithSendZCNotificationDue(t *testing.T) {
	testutil.SkipIfNoUring(t)
	testutil.Watchdog(t, 60*time.Second)
	g, err := loop.NewGroup(loop.WithBackend(loop.BackendUring), loop.WithLoops(1), loop.WithLogger(ctLogger),
		testknobs.DrainTimeout(200*time.Millisecond).(loop.Option))
	if err != nil {
		t.Skipf("io_uring: %v", err)
	}
	t.Cleanup(func() {
		g.ShutdownGracefully(0, time.Second)
		<-g.Done()
	})
	z := newZCScenario(t, g, 2*time.Second)
	if err := g.ShutdownGracefully(0, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the group did not terminate")
	}
	for _, ev := range []*ctEvents{z.evA, z.evB} {
		select {
		case <-ev.closed:
		case <-time.After(time.Second):
			t.Fatal("OnClose never ran: a connection outlived its group's termination")
		}
	}
	s := z.l.Stats()
	if s.Orphaned != 1 || s.Quarantined != 1 || s.QuarantinedBytes < zcBytes || s.OpsInFlight != 0 {
		t.Fatalf("Stats: orphaned %d, quarantined %d ops / %d bytes, in flight %d; want the SEND_ZC's %d bytes quarantined",
			s.Orphaned, s.Quarantined, s.QuarantinedBytes, s.OpsInFlight, zcBytes)
	}
}
