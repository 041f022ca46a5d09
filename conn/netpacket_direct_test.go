package conn_test

import (
	"context"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// udpDirectPair returns a NetPacketConn on 127.0.0.1 on a one-loop group
// of b and a package-net UDP socket to write to; both close when the test
// ends.
func udpDirectPair(t *testing.T, b loop.Backend, opts ...conn.Option) (*conn.NetPacketConn, *net.UDPConn) {
	t.Helper()
	g := ctGroup(t, b, 1)
	np, err := conn.ListenPacketNet(context.Background(), g, "udp", "127.0.0.1:0", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { np.Close() })
	return np, ctUDP4(t)
}

// TestNetPacketConnWriteIdleSendsWithoutLoop: on io_uring, a datagram
// written off the loops while the socket has nothing queued and its loop
// waits goes out from the writing goroutine: the peer gets it and the loop
// was never woken for it (on epoll the loop sends every datagram, and is
// woken for it). A datagram written while the loop runs a task is queued,
// and goes out, after the ones before it, once the loop is free.
func TestNetPacketConnWriteIdleSendsWithoutLoop(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		np, peer := udpDirectPair(t, b)
		l := np.PacketConn().Loop()
		to := peer.LocalAddr()
		buf := make([]byte, 64)
		woken := 0
		for i := range 20 {
			testutil.WaitFor(t, 10*time.Second, "the loop to wait", l.Idle)
			wakes := l.Stats().WakeWrites
			msg := []byte{byte(i), 'd'}
			if _, err := np.WriteTo(msg, to); err != nil {
				t.Fatalf("WriteTo: %v", err)
			}
			got := l.Stats().WakeWrites
			if b == loop.BackendUring && got != wakes {
				t.Fatalf("datagram %d: the loop was woken %d times for a write to an idle socket", i, got-wakes)
			}
			if got != wakes {
				woken++
			}
			peer.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, _, err := peer.ReadFrom(buf)
			if err != nil || string(buf[:n]) != string(msg) {
				t.Fatalf("datagram %d: peer read %q, %v, want %q", i, buf[:n], err, msg)
			}
		}
		// An epoll loop sends each datagram itself, woken for it unless
		// its wait happened to end between the check and the write.
		if b == loop.BackendEpoll && woken == 0 {
			t.Fatal("an epoll loop was never woken to send the 20 datagrams")
		}
		// The loop counts its sends after the kernel took them, which
		// may be after the peer read them.
		testutil.WaitFor(t, 10*time.Second, "20 datagrams counted sent", func() bool { return np.PacketConn().Stats().Sent == 20 })
		if st := np.PacketConn().Stats(); st.WriteErrors != 0 {
			t.Fatalf("stats %+v, want no errors", st)
		}

		release := make(chan struct{})
		busy := make(chan struct{})
		if err := l.Execute(func() { close(busy); <-release }); err != nil {
			t.Fatal(err)
		}
		<-busy
		for i := range 3 {
			if _, err := np.WriteTo([]byte{byte(i), 'q'}, to); err != nil {
				t.Fatalf("WriteTo: %v", err)
			}
		}
		if st := np.PacketConn().Stats(); st.Sent != 20 {
			t.Errorf("a write while the loop is busy went out at once (%d sent, want 20)", st.Sent)
		}
		close(release)
		for i := range 3 {
			peer.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, _, err := peer.ReadFrom(buf)
			if err != nil || string(buf[:n]) != string([]byte{byte(i), 'q'}) {
				t.Fatalf("queued datagram %d: peer read %q, %v", i, buf[:n], err)
			}
		}
	})
}

// TestNetPacketConnWriteOrderAcrossDirectAndQueued: writers on several
// goroutines send numbered datagrams over loopback while a task now and
// then holds the loop, so some go out from the writing goroutine and some
// queue behind the loop's sends. The peer receives each writer's
// datagrams in order, none lost or repeated, and every one is counted
// sent.
func TestNetPacketConnWriteOrderAcrossDirectAndQueued(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		np, peer := udpDirectPair(t, b, conn.WithDatagramQueue(32))
		if err := peer.SetReadBuffer(4 << 20); err != nil {
			t.Fatal(err)
		}
		const (
			writers = 3
			each    = 400
		)
		l := np.PacketConn().Loop()
		stop := make(chan struct{})
		holder := make(chan struct{})
		go func() {
			// Hold the loop for a moment now and then.
			defer close(holder)
			for {
				select {
				case <-stop:
					return
				case <-time.After(300 * time.Microsecond):
				}
				if l.Execute(func() { time.Sleep(200 * time.Microsecond) }) != nil {
					return
				}
			}
		}()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg := make([]byte, 8+w*100)
				for i := range each {
					binary.BigEndian.PutUint32(msg, uint32(w))
					binary.BigEndian.PutUint32(msg[4:], uint32(i))
					if _, err := np.WriteTo(msg, peer.LocalAddr()); err != nil {
						t.Errorf("writer %d: %v", w, err)
						return
					}
					if i%50 == 0 {
						time.Sleep(time.Millisecond) // let the loop go idle
					}
				}
			}()
		}
		next := make([]uint32, writers)
		buf := make([]byte, 2048)
		for range writers * each {
			peer.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, _, err := peer.ReadFrom(buf)
			if err != nil {
				t.Fatalf("read after %v: %v (stats %+v)", next, err, np.PacketConn().Stats())
			}
			w, i := binary.BigEndian.Uint32(buf), binary.BigEndian.Uint32(buf[4:])
			if n < 8 || w >= writers || n != 8+int(w)*100 || i != next[w] {
				t.Fatalf("got writer %d datagram %d (%d bytes), want datagram %d", w, i, n, next[w])
			}
			next[w]++
		}
		wg.Wait()
		close(stop)
		<-holder
		ctWaitFor(t, 10*time.Second, "every send to complete", func() bool {
			return np.PacketConn().Stats().Sent == writers*each
		})
		if st := np.PacketConn().Stats(); st.WriteErrors != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}
