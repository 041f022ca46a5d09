package conn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// The net.PacketConn contract, in the manner of nettest.TestConn: one
// suite, run against package net's own UDP sockets (which keeps the suite
// honest) and against NetPacketConn on each receive mode.

// makePacketPair returns two bound sockets on loopback and a function that
// tears them down.
type makePacketPair func(t *testing.T) (a, b net.PacketConn)

func TestNetPacketConnContract(t *testing.T) {
	t.Run("impl=net", func(t *testing.T) {
		testPacketConn(t, func(t *testing.T) (net.PacketConn, net.PacketConn) {
			a, err := net.ListenPacket("udp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			b, err := net.ListenPacket("udp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close(); b.Close() })
			return a, b
		})
	})
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 2, opts...)
		testPacketConn(t, func(t *testing.T) (net.PacketConn, net.PacketConn) {
			a, err := conn.ListenPacketNet(context.Background(), g, "udp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			b, err := conn.ListenPacketNet(context.Background(), g, "udp4", "127.0.0.1:0", conn.WithLoop(g.Loop(1)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				a.Close()
				b.Close()
				<-a.PacketConn().Done()
				<-b.PacketConn().Done()
			})
			return a, b
		})
	})
}

func testPacketConn(t *testing.T, mk makePacketPair) {
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, a, b net.PacketConn)
	}{
		{"BasicIO", packetBasicIO},
		{"ShortBuffer", packetShortBuffer},
		{"PastReadDeadline", packetPastReadDeadline},
		{"FutureReadDeadline", packetFutureReadDeadline},
		{"MovedReadDeadline", packetMovedReadDeadline},
		{"WriteDeadline", packetWriteDeadline},
		{"CloseUnblocksRead", packetCloseUnblocksRead},
		{"Concurrent", packetConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := mk(t)
			tc.f(t, a, b)
		})
	}
}

// packetBasicIO: datagrams of several sizes, empty included, arrive whole
// with their source.
func packetBasicIO(t *testing.T, a, b net.PacketConn) {
	buf := make([]byte, 2048)
	for i, n := range []int{0, 1, 100, 1472} {
		msg := bytes.Repeat([]byte{byte(i + 1)}, n)
		if w, err := a.WriteTo(msg, b.LocalAddr()); err != nil || w != n {
			t.Fatalf("WriteTo: %d, %v", w, err)
		}
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, from, err := b.ReadFrom(buf)
		if err != nil || !bytes.Equal(buf[:got], msg) {
			t.Fatalf("ReadFrom: %d B, %v; want %d B", got, err, n)
		}
		if from.String() != a.LocalAddr().String() {
			t.Fatalf("source %v, want %v", from, a.LocalAddr())
		}
	}
}

// packetShortBuffer: a datagram longer than the read buffer is cut to it,
// and the next datagram is read whole.
func packetShortBuffer(t *testing.T, a, b net.PacketConn) {
	a.WriteTo([]byte("0123456789"), b.LocalAddr())
	a.WriteTo([]byte("next"), b.LocalAddr())
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	p := make([]byte, 4)
	if n, _, err := b.ReadFrom(p); err != nil || string(p[:n]) != "0123" {
		t.Fatalf("short read: %q, %v", p[:n], err)
	}
	if n, _, err := b.ReadFrom(make([]byte, 16)); err != nil || n != 4 {
		t.Fatalf("the next datagram: %d B, %v", n, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
}

// packetPastReadDeadline: a deadline in the past fails a read at once.
func packetPastReadDeadline(t *testing.T, a, b net.PacketConn) {
	b.SetReadDeadline(time.Now().Add(-time.Second))
	start := time.Now()
	if _, _, err := b.ReadFrom(make([]byte, 8)); !isTimeout(err) {
		t.Fatalf("ReadFrom after the deadline: %v", err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("a past deadline blocked")
	}
	// Cleared, a datagram is read again.
	b.SetReadDeadline(time.Time{})
	a.WriteTo([]byte("x"), b.LocalAddr())
	if n, _, err := b.ReadFrom(make([]byte, 8)); err != nil || n != 1 {
		t.Fatalf("after clearing the deadline: %d, %v", n, err)
	}
}

// packetFutureReadDeadline: a blocked read ends at its deadline, not
// before.
func packetFutureReadDeadline(t *testing.T, a, b net.PacketConn) {
	const d = 50 * time.Millisecond
	start := time.Now()
	b.SetReadDeadline(start.Add(d))
	_, _, err := b.ReadFrom(make([]byte, 8))
	if el := time.Since(start); !isTimeout(err) || el < d || el > 5*time.Second {
		t.Fatalf("ReadFrom: %v after %v, want a timeout after %v", err, el, d)
	}
}

// packetMovedReadDeadline: a deadline moved later while a read waits
// holds the read until the new one; moved earlier, it ends it.
func packetMovedReadDeadline(t *testing.T, a, b net.PacketConn) {
	start := time.Now()
	b.SetReadDeadline(start.Add(100 * time.Millisecond))
	go func() {
		if !testutil.Eventually(10*time.Second, readBlocked(b)) {
			t.Errorf("ReadFrom did not block")
		}
		b.SetReadDeadline(start.Add(200 * time.Millisecond))
	}()
	_, _, err := b.ReadFrom(make([]byte, 8))
	if el := time.Since(start); !isTimeout(err) || el < 200*time.Millisecond {
		t.Fatalf("ReadFrom: %v after %v, want a timeout after 200ms", err, el)
	}
	b.SetReadDeadline(time.Time{})
	go func() {
		if !testutil.Eventually(10*time.Second, readBlocked(b)) {
			t.Errorf("ReadFrom did not block")
		}
		b.SetReadDeadline(time.Now())
	}()
	if _, _, err := b.ReadFrom(make([]byte, 8)); !isTimeout(err) {
		t.Fatalf("ReadFrom with the deadline moved to now: %v", err)
	}
}

// packetWriteDeadline: a write after the write deadline fails; cleared,
// writes go through.
func packetWriteDeadline(t *testing.T, a, b net.PacketConn) {
	a.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := a.WriteTo([]byte("late"), b.LocalAddr()); !isTimeout(err) {
		t.Fatalf("WriteTo after the deadline: %v", err)
	}
	a.SetWriteDeadline(time.Now().Add(30 * time.Millisecond))
	// Past the deadline, and past package net's timer that marks it
	// passed: the deadline is an instant of the real clock.
	time.Sleep(50 * time.Millisecond)
	if _, err := a.WriteTo([]byte("late"), b.LocalAddr()); !isTimeout(err) {
		t.Fatalf("WriteTo after a deadline that passed: %v", err)
	}
	a.SetWriteDeadline(time.Time{})
	if _, err := a.WriteTo([]byte("ok"), b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _, err := b.ReadFrom(make([]byte, 8)); err != nil || n != 2 {
		t.Fatalf("after clearing the write deadline: %d, %v", n, err)
	}
}

// packetCloseUnblocksRead: Close ends a blocked read with net.ErrClosed;
// every later call fails with it.
func packetCloseUnblocksRead(t *testing.T, a, b net.PacketConn) {
	done := make(chan error, 1)
	go func() {
		_, _, err := b.ReadFrom(make([]byte, 8))
		done <- err
	}()
	ctWaitFor(t, 10*time.Second, "ReadFrom to block", readBlocked(b))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked ReadFrom: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock ReadFrom")
	}
	if _, _, err := b.ReadFrom(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadFrom after Close: %v", err)
	}
	if _, err := b.WriteTo([]byte("x"), a.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteTo after Close: %v", err)
	}
	if err := b.Close(); err == nil {
		t.Fatal("a second Close succeeded")
	}
	if err := b.SetDeadline(time.Now()); err == nil && !isStdlib(b) {
		t.Fatal("SetDeadline after Close succeeded")
	}
}

// readBlocked returns a condition that holds while a ReadFrom of c waits:
// for a NetPacketConn by its count of blocked goroutines, for package
// net's socket by the goroutine's stack (parked in the network poller).
func readBlocked(c net.PacketConn) func() bool {
	if np, ok := c.(*conn.NetPacketConn); ok {
		return func() bool { return conn.NetPacketWaiters(np) > 0 }
	}
	return func() bool { return testutil.Parked("net.(*UDPConn).ReadFrom") > 0 }
}

// isStdlib reports package net's own socket (whose SetDeadline after Close
// is not checked here either way).
func isStdlib(c net.PacketConn) bool { _, ok := c.(*net.UDPConn); return ok }

// packetConcurrent: 4 writers and 2 readers at once; every datagram
// arrives once.
func packetConcurrent(t *testing.T, a, b net.PacketConn) {
	const writers, per = 4, 250
	var wg sync.WaitGroup
	var sent, read atomic.Int64
	// Within the socket buffers: at most 64 datagrams neither read nor
	// counted as dropped, and 16 more per writer.
	caughtUp := func() bool {
		d, err := packetDropCount(b)
		return err != nil || sent.Load()-read.Load()-int64(d) < 64
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				a.WriteTo([]byte(fmt.Sprintf("%d/%d", w, i)), b.LocalAddr())
				sent.Add(1)
				if i%16 == 15 && !testutil.Eventually(10*time.Second, caughtUp) {
					t.Errorf("writer %d: the readers did not catch up", w)
					return
				}
			}
		}()
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	var rg sync.WaitGroup
	for range 2 {
		rg.Add(1)
		go func() {
			defer rg.Done()
			buf := make([]byte, 32)
			for {
				b.SetReadDeadline(time.Now().Add(time.Second))
				n, _, err := b.ReadFrom(buf)
				if err != nil {
					return
				}
				read.Add(1)
				mu.Lock()
				if seen[string(buf[:n])] {
					t.Errorf("datagram %q read twice", buf[:n])
				}
				seen[string(buf[:n])] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rg.Wait()
	// UDP may drop when the readers fall behind (under -race they do);
	// every drop must show in the counters, never be silent.
	if lost := uint64(writers*per - len(seen)); lost != packetDrops(t, b) || len(seen) == 0 {
		t.Fatalf("%d of %d datagrams read, %d dropped by the counters", len(seen), writers*per, packetDrops(t, b))
	}
}

// packetDrops counts the datagrams c's socket dropped: the kernel's count,
// and a NetPacketConn's own for its inbound queue.
func packetDrops(t *testing.T, c net.PacketConn) uint64 {
	d, err := packetDropCount(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// packetDropCount is packetDrops for any goroutine.
func packetDropCount(c net.PacketConn) (uint64, error) {
	switch c := c.(type) {
	case *conn.NetPacketConn:
		return c.Dropped() + c.PacketConn().Stats().KernelDrops, nil
	case *net.UDPConn:
		var d uint32
		rc, err := c.SyscallConn()
		if err != nil {
			return 0, err
		}
		rc.Control(func(fd uintptr) { d, err = sock.SocketDrops(int(fd)) })
		return uint64(d), err
	}
	return 0, fmt.Errorf("no drop count for %T", c)
}

// TestNetPacketConnDial: DialPacketNet gives a net.Conn: Write to the
// peer, Read its replies.
func TestNetPacketConnDial(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		srv := ctListenPacket(t, g, "udp4", "127.0.0.1:0", newPacketRecorder(true))
		c, err := conn.DialPacketNet(context.Background(), g, "udp4", srv.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var nc net.Conn = c
		if nc.RemoteAddr().String() != srv.LocalAddr().String() {
			t.Fatalf("RemoteAddr %v", nc.RemoteAddr())
		}
		for i := range 5 {
			msg := []byte(fmt.Sprintf("round %d", i))
			if _, err := nc.Write(msg); err != nil {
				t.Fatal(err)
			}
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 32)
			n, err := nc.Read(buf)
			if err != nil || string(buf[:n]) != string(msg) {
				t.Fatalf("echo %q, %v", buf[:n], err)
			}
		}
	})
}
