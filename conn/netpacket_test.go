package conn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
			// A short outbound queue, so that a writer outpaces the loop
			// and has to wait for room (WriteFlood).
			q := conn.WithDatagramQueue(16)
			a, err := conn.ListenPacketNet(context.Background(), g, "udp4", "127.0.0.1:0", q)
			if err != nil {
				t.Fatal(err)
			}
			b, err := conn.ListenPacketNet(context.Background(), g, "udp4", "127.0.0.1:0", q, conn.WithLoop(g.Loop(1)))
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
		{"WriteFlood", packetWriteFlood},
		{"Oversized", packetOversized},
		{"Large", packetLarge},
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
	// With a datagram waiting, the passed deadline still fails the read.
	a.WriteTo([]byte("x"), b.LocalAddr())
	time.Sleep(20 * time.Millisecond) // it has arrived
	if n, _, err := b.ReadFrom(make([]byte, 8)); !isTimeout(err) {
		t.Fatalf("ReadFrom after the deadline, a datagram queued: %d, %v", n, err)
	}
	// Cleared, the datagram is read.
	b.SetReadDeadline(time.Time{})
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

// packetWriteFlood: writers that outpace the socket (a's queue, the
// loop's sends) never see a write fail: each write waits for room, as
// package net's does for the kernel's send buffer. A reader that keeps up
// (its socket buffer large, the writers at most a window ahead of it)
// reads every datagram, intact and in order per writer.
func packetWriteFlood(t *testing.T, a, b net.PacketConn) {
	writers, per := 4, 2000
	if testing.Short() {
		per = 500
	}
	const size, window = 1400, 256
	if err := b.(interface{ SetReadBuffer(int) error }).SetReadBuffer(4 << 20); err != nil {
		t.Fatal(err)
	}
	credits := make(chan struct{}, window) // datagrams written and not read yet
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := make([]byte, size)
			for i := range per {
				credits <- struct{}{}
				floodDatagram(msg, w, i)
				if n, err := a.WriteTo(msg, b.LocalAddr()); err != nil || n != size {
					t.Errorf("writer %d, datagram %d: WriteTo %d, %v", w, i, n, err)
					return
				}
			}
		}()
	}
	next := make([]int, writers)
	buf, want := make([]byte, 2*size), make([]byte, size)
	for range writers * per {
		b.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := b.ReadFrom(buf)
		if err != nil {
			d, _ := packetDropCount(b)
			t.Errorf("ReadFrom after %v of %d per writer: %v (drops counted: %d)", next, per, err, d)
			break
		}
		<-credits
		w := int(buf[0])
		if n != size || w >= writers {
			t.Fatalf("a datagram of %d bytes from writer %d", n, w)
		}
		floodDatagram(want, w, next[w])
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("writer %d: datagram %d, want %d intact", w, int(buf[1])|int(buf[2])<<8, next[w])
		}
		next[w]++
	}
	wg.Wait()
	if np, ok := a.(*conn.NetPacketConn); ok {
		if st := np.PacketConn().Stats(); st.QueueFull != 0 || st.WriteErrors != 0 {
			t.Errorf("writer's stats %+v: a write was refused", st)
		}
	}
}

// floodDatagram fills msg as writer w's datagram i: the writer, the
// index, and bytes that depend on both.
func floodDatagram(msg []byte, w, i int) {
	msg[0], msg[1], msg[2] = byte(w), byte(i), byte(i>>8)
	for k := 3; k < len(msg); k++ {
		msg[k] = byte(k*7 + i*13 + w)
	}
}

// packetOversized: a datagram longer than UDP over IPv4 carries fails the
// write with EMSGSIZE, as the kernel refuses it; the longest one goes.
func packetOversized(t *testing.T, a, b net.PacketConn) {
	_, err := a.WriteTo(make([]byte, 65508), b.LocalAddr())
	var oe *net.OpError
	if !errors.Is(err, syscall.EMSGSIZE) || !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("WriteTo of 65,508 bytes: %v, want a *net.OpError wrapping EMSGSIZE", err)
	}
	if _, err := a.WriteTo(make([]byte, 65507), b.LocalAddr()); err != nil {
		t.Fatalf("WriteTo of 65,507 bytes: %v", err)
	}
}

// packetLarge: datagrams of 10 KB, 32 KiB and the longest UDP/IPv4
// carries (65,507 bytes) arrive whole: a read with a 64 KiB buffer gets
// all of each, byte for byte, from its source.
func packetLarge(t *testing.T, a, b net.PacketConn) {
	buf := make([]byte, 64<<10)
	for i, n := range largeDgramSizes {
		msg := largeDgram(i, n)
		if w, err := a.WriteTo(msg, b.LocalAddr()); err != nil || w != n {
			t.Fatalf("WriteTo of %d bytes: %d, %v", n, w, err)
		}
		b.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, from, err := b.ReadFrom(buf)
		if err != nil || got != n || !bytes.Equal(buf[:got], msg) {
			t.Fatalf("ReadFrom: %d B, %v; want the %d B sent", got, err, n)
		}
		if from.String() != a.LocalAddr().String() {
			t.Fatalf("source %v, want %v", from, a.LocalAddr())
		}
	}
}

// largeDgramSizes are the sizes packetLarge sends: 10 KB, 32 KiB, and the
// longest UDP datagram over IPv4.
var largeDgramSizes = []int{10_000, 32 << 10, 65_507}

// largeDgram returns a datagram of n bytes whose every byte depends on its
// place and on i, so that a cut, a shift or a mix-up shows.
func largeDgram(i, n int) []byte {
	msg := make([]byte, n)
	for j := range msg {
		msg[j] = byte(j*7 + j>>8 + i*31)
	}
	return msg
}

// The blocking side of writes, in the manner of the contract above: a
// socket dialed to a Unix datagram socket that does not read fills the
// peer's queue (net.unix.max_dgram_qlen), and then writes wait, which UDP
// over loopback never makes them do. One suite, run against package net's
// dialed socket and against DialPacketNet's.

// makeBlockingPair returns a dialed socket and the peer it writes to,
// which reads nothing until the test does.
type makeBlockingPair func(t *testing.T) (w net.Conn, r net.PacketConn)

// unixgramPeer opens a Unix datagram socket on an abstract name; the
// caller closes it.
func unixgramPeer(t *testing.T) net.PacketConn {
	t.Helper()
	name := fmt.Sprintf("@ringloop-dgram-%d-%d", os.Getpid(), unixgramPeers.Add(1))
	r, err := net.ListenPacket("unixgram", name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var unixgramPeers atomic.Int64

func TestNetPacketConnWriteBlocks(t *testing.T) {
	t.Run("impl=net", func(t *testing.T) {
		testBlockingWrites(t, func(t *testing.T) (net.Conn, net.PacketConn) {
			r := unixgramPeer(t)
			w, err := net.Dial("unixgram", r.LocalAddr().String())
			if err != nil {
				r.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close(); w.Close() })
			return w, r
		})
	})
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		testBlockingWrites(t, func(t *testing.T) (net.Conn, net.PacketConn) {
			r := unixgramPeer(t)
			w, err := conn.DialPacketNet(context.Background(), g, "unixgram", r.LocalAddr().String(), conn.WithDatagramQueue(16))
			if err != nil {
				r.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close(); <-w.PacketConn().Done(); r.Close() })
			return w, r
		})
	})
}

func testBlockingWrites(t *testing.T, mk makeBlockingPair) {
	for _, tc := range []struct {
		name string
		f    func(t *testing.T, w net.Conn, r net.PacketConn)
	}{
		{"DeadlineWhileBlocked", blockedWriteDeadline},
		{"DeadlineSetWhileBlocked", blockedWriteDeadlineSet},
		{"ReaderUnblocks", blockedWriteReader},
		{"CloseUnblocksWrite", blockedWriteClose},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, r := mk(t)
			tc.f(t, w, r)
		})
	}
}

// writeUntilBlocked writes numbered datagrams to w until one fails, and
// returns how many went through and the error. The peer reads nothing,
// so one of them blocks.
func writeUntilBlocked(w net.Conn) (int, error) {
	msg := make([]byte, 100)
	for i := 0; ; i++ {
		msg[0], msg[1] = byte(i), byte(i>>8)
		if _, err := w.Write(msg); err != nil {
			return i, err
		}
		if i > 50000 {
			return i, errors.New("50,000 writes went through to a peer that reads nothing")
		}
	}
}

// blockedWriteDeadline: a write blocked on a full peer fails when the
// write deadline passes, not before, with a timeout; then a deadline in
// the past fails a write at once.
func blockedWriteDeadline(t *testing.T, w net.Conn, r net.PacketConn) {
	const d = 100 * time.Millisecond
	start := time.Now()
	w.SetWriteDeadline(start.Add(d))
	n, err := writeUntilBlocked(w)
	if el := time.Since(start); !isTimeout(err) || el < d || el > 5*time.Second {
		t.Fatalf("after %d writes: %v after %v, want a timeout after %v", n, err, el, d)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("%v (%T): want a *net.OpError", err, err)
	}
	w.SetWriteDeadline(time.Now().Add(-time.Second))
	start = time.Now()
	if _, err := w.Write([]byte("late")); !isTimeout(err) || time.Since(start) > time.Second {
		t.Fatalf("Write past the deadline: %v after %v", err, time.Since(start))
	}
}

// blockedWriteDeadlineSet: a deadline set while a write is blocked ends
// it when it passes.
func blockedWriteDeadlineSet(t *testing.T, w net.Conn, r net.PacketConn) {
	done := make(chan error, 1)
	go func() {
		_, err := writeUntilBlocked(w)
		done <- err
	}()
	ctWaitFor(t, 10*time.Second, "a write to block", writeBlocked(w))
	const d = 50 * time.Millisecond
	start := time.Now()
	w.SetWriteDeadline(start.Add(d))
	select {
	case err := <-done:
		if el := time.Since(start); !isTimeout(err) || el < d {
			t.Fatalf("blocked Write: %v after %v, want a timeout after %v", err, el, d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline did not end the blocked Write")
	}
}

// blockedWriteReader: a writer blocked on a full peer goes on as the peer
// reads, and every datagram arrives, in order: a datagram socket that
// cannot drop (Unix) loses nothing to a writer that outpaces its reader.
func blockedWriteReader(t *testing.T, w net.Conn, r net.PacketConn) {
	total := 2000
	if testing.Short() {
		total = 500
	}
	done := make(chan error, 1)
	go func() {
		msg := make([]byte, 100)
		for i := range total {
			msg[0], msg[1] = byte(i), byte(i>>8)
			if _, err := w.Write(msg); err != nil {
				done <- fmt.Errorf("write %d: %w", i, err)
				return
			}
		}
		done <- nil
	}()
	ctWaitFor(t, 10*time.Second, "a write to block", writeBlocked(w))
	buf := make([]byte, 200)
	for i := range total {
		r.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := r.ReadFrom(buf)
		if err != nil || n != 100 || int(buf[0])|int(buf[1])<<8 != i&0xffff {
			t.Fatalf("datagram %d: %d bytes, %v, index %d", i, n, err, int(buf[0])|int(buf[1])<<8)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// blockedWriteClose: Close ends a blocked write with net.ErrClosed.
func blockedWriteClose(t *testing.T, w net.Conn, r net.PacketConn) {
	done := make(chan error, 1)
	go func() {
		_, err := writeUntilBlocked(w)
		done <- err
	}()
	ctWaitFor(t, 10*time.Second, "a write to block", writeBlocked(w))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked Write: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Write")
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
}

// writeBlocked returns a condition that holds while a Write of c waits:
// for a NetPacketConn by its count of blocked goroutines, for package
// net's socket by the goroutine's stack.
func writeBlocked(c net.Conn) func() bool {
	if np, ok := c.(*conn.NetPacketConn); ok {
		return func() bool { return conn.NetPacketWaiters(np) > 0 }
	}
	return func() bool { return testutil.Parked("net.(*conn).Write") > 0 }
}

// TestNetPacketConnWriteInLoop: on a loop goroutine a write never waits:
// one that finds the queue full fails at once with an error wrapping
// ErrQueueFull and loop.ErrInLoop, and is counted; the queued ones go out.
func TestNetPacketConnWriteInLoop(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, opts...)
		rx := ctUDP4(t)
		np, err := conn.DialPacketNet(context.Background(), g, "udp4", rx.LocalAddr().String(), conn.WithDatagramQueue(4))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { np.Close(); <-np.PacketConn().Done() }()
		errs := make(chan error, 10)
		// On the loop, the queue is flushed only at the end of the turn:
		// the fifth write of the turn finds it full.
		np.PacketConn().Loop().Execute(func() {
			for i := range 10 {
				_, err := np.Write([]byte{byte(i)})
				errs <- err
			}
		})
		refused := 0
		for range 10 {
			err := <-errs
			var oe *net.OpError
			switch {
			case err == nil:
			case errors.Is(err, conn.ErrQueueFull) && errors.Is(err, loop.ErrInLoop) && errors.As(err, &oe):
				refused++
			default:
				t.Fatalf("Write on the loop: %v", err)
			}
		}
		if refused != 6 {
			t.Fatalf("%d writes refused, want 6", refused)
		}
		buf := make([]byte, 8)
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		for i := range 4 {
			if n, err := rx.Read(buf); err != nil || n != 1 || buf[0] != byte(i) {
				t.Fatalf("datagram %d: %v %v", i, buf[:n], err)
			}
		}
		if st := np.PacketConn().Stats(); st.QueueFull != 6 {
			t.Fatalf("QueueFull %d, want 6", st.QueueFull)
		}
	})
}

// TestNetPacketConnOversized: the longest datagram UDP carries depends on
// the destination's IP version (65,507 bytes over IPv4, 65,527 over
// IPv6, a v4-mapped destination counting as IPv4); longer ones fail with
// EMSGSIZE before they are queued, on WriteTo and on a connected socket's
// Write, as with package net.
func TestNetPacketConnOversized(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, opts...)
		v4 := ctUDP4(t)
		cases := []struct {
			network, local string
			to             net.Addr
			max            int
		}{
			{"udp4", "127.0.0.1:0", v4.LocalAddr(), 65507},
			{"udp", "[::]:0", v4.LocalAddr(), 65507},
		}
		if v6, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback}); err == nil {
			defer v6.Close()
			cases = append(cases, struct {
				network, local string
				to             net.Addr
				max            int
			}{"udp6", "[::1]:0", v6.LocalAddr(), 65527})
		}
		for _, c := range cases {
			np, err := conn.ListenPacketNet(context.Background(), g, c.network, c.local)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := np.WriteTo(make([]byte, c.max), c.to); err != nil {
				t.Errorf("%s to %v: %d bytes: %v", c.network, c.to, c.max, err)
			}
			_, err = np.WriteTo(make([]byte, c.max+1), c.to)
			if !errors.Is(err, syscall.EMSGSIZE) || !strings.Contains(err.Error(), "sendto") {
				t.Errorf("%s to %v: %d bytes: %v, want sendto: EMSGSIZE", c.network, c.to, c.max+1, err)
			}
			np.Close()
			<-np.PacketConn().Done()
		}
		c, err := conn.DialPacketNet(context.Background(), g, "udp4", v4.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { c.Close(); <-c.PacketConn().Done() }()
		if _, err := c.Write(make([]byte, 65508)); !errors.Is(err, syscall.EMSGSIZE) || !strings.Contains(err.Error(), "write:") {
			t.Errorf("connected Write of 65,508 bytes: %v, want write: EMSGSIZE", err)
		}
		if st := c.PacketConn().Stats(); st.WriteErrors != 0 {
			t.Errorf("the refused datagram reached the loop: %+v", st)
		}
	})
}
