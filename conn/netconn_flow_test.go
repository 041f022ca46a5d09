package conn_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// ncPair returns a dialed and an accepted NetConn on g, closed when the
// test ends.
func ncPair(t *testing.T, g *loop.Group, opts ...conn.Option) (d, a *conn.NetConn) {
	t.Helper()
	ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	d, err = conn.DialNet(context.Background(), g, "tcp", ln.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c := <-accepted
	if c == nil {
		t.FailNow()
	}
	a = c.(*conn.NetConn)
	t.Cleanup(func() { a.Close() })
	return d, a
}

// A NetConn that nobody reads stops receiving after a buffer or two, well
// under its bound: the sender blocks (its write deadline passes); every
// byte then arrives, in order.
func TestNetConnInboundBound(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		const limit = 32 << 10
		d, a := ncPair(t, g, conn.WithInboundLimit(limit))
		total := 64 << 20
		if testing.Short() || accRace {
			total = 16 << 20
		}
		src := make([]byte, total)
		ctPattern(src, 0)
		d.SetWriteDeadline(time.Now().Add(2 * time.Second))
		written, err := d.Write(src)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Write to a reader that never reads: %d bytes, %v; want a deadline error", written, err)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("deadline error %v is not a net.Error with Timeout", err)
		}
		held := conn.NetBuffered(a)
		t.Logf("wrote %d of %d bytes before the deadline; the reader holds %d (bound %d)", written, total, held, limit)
		// Its receives follow its reader, who took nothing: one
		// buffer's worth (4 KiB) is received ahead, not the bound.
		if held > 8<<10 {
			t.Fatalf("the reader holds %d bytes (bound %d), want at most two buffers: it never read", held, limit)
		}
		if written >= total {
			t.Fatal("the whole write went through a reader that never read")
		}
		d.SetWriteDeadline(time.Time{})
		go func() {
			if _, err := d.Write(src[written:]); err != nil {
				t.Error(err)
			}
			d.CloseWrite()
		}()
		a.SetReadDeadline(time.Now().Add(60 * time.Second))
		got, err := io.ReadAll(a)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, src) {
			t.Fatalf("read %d bytes, want %d, intact: %v", len(got), len(src), len(got) == len(src))
		}
	})
}

// Close unblocks a pending Read and a pending Write with net.ErrClosed.
func TestNetConnCloseUnblocks(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		d, _ := ncPair(t, g, conn.WithInboundLimit(16<<10))
		errs := make(chan error, 2)
		go func() {
			_, err := d.Read(make([]byte, 10))
			errs <- err
		}()
		go func() {
			_, err := d.Write(make([]byte, 256<<20)) // the peer never reads
			errs <- err
		}()
		ctWaitFor(t, 10*time.Second, "the Read and the Write to block", func() bool { return conn.NetWaiters(d) == 2 })
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			select {
			case err := <-errs:
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("pending call ended with %v, want net.ErrClosed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Close left a Read or Write blocked")
			}
		}
		if err := d.Close(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := d.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write after Close: %v", err)
		}
	})
}

// Deadlines of several connections on one loop share its deadline queue:
// one far off does not hold back a nearer one set later on another
// connection, a cleared one expires nothing, and checks leave the queue as
// they come due.
func TestNetConnDeadlineQueue(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		far, _ := ncPair(t, g)
		near, _ := ncPair(t, g)
		cleared, _ := ncPair(t, g)
		l := far.Conn().Loop()
		if n := conn.DeadlineQueueLen(l); n != 0 {
			t.Fatalf("%d checks queued before any deadline", n)
		}
		far.SetReadDeadline(time.Now().Add(time.Hour))
		cleared.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		cleared.SetReadDeadline(time.Time{})
		near.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
		res := make(chan error, 1)
		go func() {
			_, err := cleared.Read(make([]byte, 1))
			res <- err
		}()
		start := time.Now()
		watchdog := time.AfterFunc(5*time.Second, func() { near.Close() }) // a missed deadline fails, not hangs
		_, err := near.Read(make([]byte, 1))
		watchdog.Stop()
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read: %v, want a deadline error", err)
		}
		if el := time.Since(start); el < 140*time.Millisecond || el > 2*time.Second {
			t.Fatalf("a 150 ms deadline, set after one of an hour, ended the Read after %v", el)
		}
		// The cleared deadline's check came due before the near one's;
		// a Read it ended would have returned by now, or show below as
		// a deadline error where Close should end it.
		select {
		case err := <-res:
			t.Fatalf("Read after its deadline was cleared returned %v", err)
		default:
		}
		if n := conn.DeadlineQueueLen(l); n != 1 {
			t.Fatalf("%d checks queued once two came due, want the far one only", n)
		}
		cleared.Close()
		if err := <-res; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read ended by Close: %v", err)
		}
	})
}

// A deadline pushed later on every call, as an HTTP server does per
// request, schedules about one timer per deadline period, not one per call;
// an earlier deadline still takes effect on time.
func TestNetConnDeadlineTimers(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		d, _ := ncPair(t, g)
		armed := conn.NetDeadlineChecks()
		for i := range 10000 {
			d.SetReadDeadline(time.Now().Add(time.Hour + time.Duration(i)*time.Microsecond))
		}
		if n := conn.NetDeadlineChecks() - armed; n > 2 {
			t.Fatalf("10,000 later deadlines scheduled %d timers", n)
		}
		d.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		start := time.Now()
		_, err := d.Read(make([]byte, 1))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read: %v, want a deadline error", err)
		}
		if el := time.Since(start); el < 90*time.Millisecond || el > 2*time.Second {
			t.Fatalf("the 100 ms deadline ended the Read after %v", el)
		}
		// A deadline cleared after it passed lets Read wait again.
		d.SetReadDeadline(time.Time{})
		res := make(chan error, 1)
		go func() {
			_, err := d.Read(make([]byte, 1))
			res <- err
		}()
		ctWaitFor(t, 10*time.Second, "the Read to wait", func() bool {
			select {
			case err := <-res:
				t.Fatalf("Read with no deadline returned %v", err)
			default:
			}
			return conn.NetWaiters(d) == 1
		})
		d.SetReadDeadline(time.Now()) // a deadline in the past ends it now
		select {
		case err := <-res:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Read: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a past deadline left Read blocked")
		}
	})
}

// On a loop goroutine a Read that would block refuses with loop.ErrInLoop
// instead of stalling the loop.
func TestNetConnReadInLoop(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		d, _ := ncPair(t, g)
		res := make(chan error, 1)
		if err := d.Conn().Loop().Execute(func() {
			_, err := d.Read(make([]byte, 1))
			res <- err
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-res:
			if !errors.Is(err, loop.ErrInLoop) {
				t.Fatalf("Read on the loop: %v, want loop.ErrInLoop", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Read blocked the loop")
		}
	})
}

// io.Copy into a NetConn from a reader without WriteTo goes through
// ReadFrom (bytes read straight into outbound chunks): 8 MiB arrive intact
// and in order, with backpressure from a slow reader on the other side.
func TestNetConnReadFrom(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		d, a := ncPair(t, g)
		const n = 8 << 20
		src := make([]byte, n)
		ctPattern(src, 0)
		copied := make(chan error, 1)
		go func() {
			m, err := io.Copy(d, io.LimitReader(bytes.NewReader(src), n)) // LimitedReader has no WriteTo
			if err == nil && m != n {
				err = io.ErrShortWrite
			}
			if err == nil {
				err = d.CloseWrite()
			}
			copied <- err
		}()
		a.SetReadDeadline(time.Now().Add(30 * time.Second))
		got := make([]byte, 0, n)
		buf := make([]byte, 1000) // slow, small reads
		for {
			k, err := a.Read(buf)
			got = append(got, buf[:k]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := <-copied; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, src) {
			t.Fatalf("read %d bytes, want %d, intact: false", len(got), n)
		}
	})
}
