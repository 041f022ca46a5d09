package conn_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// A Unix datagram peer holds few datagrams (net.unix.max_dgram_qlen, 10 by
// default) and then refuses more until it reads: a writer that outpaces
// its reader finds it full all the time. These tests write to such a peer
// through a socket that is connected to it (Write) and through one that
// is not (WriteTo), whose writability says nothing of the peer's room.

// unixgramWriter opens a NetPacketConn that writes to peer: dialed to it
// (connected) or bound to a name of its own. write sends one datagram.
func unixgramWriter(t *testing.T, g *loop.Group, peer net.Addr, connected bool, opts ...conn.Option) (np *conn.NetPacketConn, write func([]byte) (int, error)) {
	t.Helper()
	var err error
	if connected {
		np, err = conn.DialPacketNet(context.Background(), g, "unixgram", peer.String(), opts...)
	} else {
		name := fmt.Sprintf("@ringloop-dgram-writer-%d-%d", os.Getpid(), unixgramPeers.Add(1))
		np, err = conn.ListenPacketNet(context.Background(), g, "unixgram", name, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	if connected {
		return np, np.Write
	}
	return np, func(p []byte) (int, error) { return np.WriteTo(p, peer) }
}

// slowDgram is datagram i of the slow-reader test: its index, then bytes
// that depend on it, 4 to 1,503 bytes long.
func slowDgram(buf []byte, i int) []byte {
	n := 4 + (i*37)%1500
	b := buf[:n]
	binary.LittleEndian.PutUint32(b, uint32(i))
	for j := 4; j < n; j++ {
		b[j] = byte(i + j)
	}
	return b
}

// TestUnixgramSlowReader: a writer blasting datagrams at a Unix datagram
// peer that reads slowly loses nothing: every datagram arrives whole, in
// order, none empty, and each is counted sent, none as an error.
func TestUnixgramSlowReader(t *testing.T) {
	total := 3000
	if testing.Short() {
		total = 1000
	}
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		for _, connected := range []bool{true, false} {
			t.Run(fmt.Sprintf("connected=%v", connected), func(t *testing.T) {
				r := unixgramPeer(t)
				defer r.Close()
				w, write := unixgramWriter(t, g, r.LocalAddr(), connected, conn.WithDatagramQueue(64))
				defer func() { w.Close(); <-w.PacketConn().Done() }()
				done := make(chan error, 1)
				go func() {
					buf := make([]byte, 2048)
					for i := range total {
						if _, err := write(slowDgram(buf, i)); err != nil {
							done <- fmt.Errorf("write %d: %w", i, err)
							return
						}
					}
					done <- nil
				}()
				buf := make([]byte, 4096)
				want := make([]byte, 2048)
				for i := range total {
					if i%100 == 50 {
						// The reader falls behind now and then.
						time.Sleep(2 * time.Millisecond)
					}
					r.SetReadDeadline(time.Now().Add(10 * time.Second))
					n, _, err := r.ReadFrom(buf)
					if err != nil {
						t.Fatalf("datagram %d: %v (writer %+v)", i, err, w.PacketConn().Stats())
					}
					if exp := slowDgram(want, i); string(buf[:n]) != string(exp) {
						got := -1
						if n >= 4 {
							got = int(binary.LittleEndian.Uint32(buf))
						}
						t.Fatalf("datagram %d: %d bytes (index %d), want %d bytes", i, n, got, len(exp))
					}
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				ctWaitFor(t, 10*time.Second, "every send to complete", func() bool {
					return w.PacketConn().Stats().Sent == uint64(total)
				})
				if st := w.PacketConn().Stats(); st.WriteErrors != 0 || st.QueueFull != 0 {
					t.Fatalf("writer stats %+v", st)
				}
			})
		}
	})
}

// TestUnixgramCloseFullPeer: Close of a Unix datagram socket whose peer
// never reads returns at once and the socket finishes closing (Done)
// promptly, as package net's Close does: a writer blocked for room fails
// with net.ErrClosed, and the datagrams the peer had no room for are
// dropped and counted (every datagram a write took is counted sent or as
// a write error). Connected and not, through NetPacketConn and
// PacketConn.
func TestUnixgramCloseFullPeer(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, be loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, be, 1, opts...)
		for _, connected := range []bool{true, false} {
			t.Run(fmt.Sprintf("net/connected=%v", connected), func(t *testing.T) {
				r := unixgramPeer(t)
				defer r.Close()
				w, write := unixgramWriter(t, g, r.LocalAddr(), connected, conn.WithDatagramQueue(16))
				type result struct {
					taken int
					err   error
				}
				done := make(chan result, 1)
				go func() {
					msg := make([]byte, 100)
					for i := 0; ; i++ {
						if _, err := write(msg); err != nil {
							done <- result{i, err}
							return
						}
					}
				}()
				ctWaitFor(t, 10*time.Second, "a write to block", func() bool { return conn.NetPacketWaiters(w) > 0 })
				closeAndCheck(t, w.Close, w.PacketConn())
				res := <-done
				if !errors.Is(res.err, net.ErrClosed) {
					t.Fatalf("blocked write: %v, want net.ErrClosed", res.err)
				}
				if st := w.PacketConn().Stats(); st.Sent+st.WriteErrors != uint64(res.taken) || st.Sent == 0 {
					t.Fatalf("%d datagrams taken, stats %+v: want each sent or counted", res.taken, st)
				}
			})
			t.Run(fmt.Sprintf("packet/connected=%v", connected), func(t *testing.T) {
				r := unixgramPeer(t)
				defer r.Close()
				h := newPacketRecorder(false)
				var pc *conn.PacketConn
				var err error
				if connected {
					pc, err = conn.DialPacket(context.Background(), g, "unixgram", r.LocalAddr().String(), h, conn.WithDatagramQueue(64))
				} else {
					name := fmt.Sprintf("@ringloop-dgram-writer-%d-%d", os.Getpid(), unixgramPeers.Add(1))
					pc, err = conn.ListenPacket(context.Background(), g, "unixgram", name, h, conn.WithDatagramQueue(64))
				}
				if err != nil {
					t.Fatal(err)
				}
				taken := 0
				for range 64 {
					var err error
					if connected {
						_, err = pc.Write(make([]byte, 100))
					} else {
						_, err = pc.WriteTo(make([]byte, 100), r.LocalAddr())
					}
					switch {
					case err == nil:
						taken++
					case !errors.Is(err, conn.ErrQueueFull):
						t.Fatal(err)
					}
				}
				ctWaitFor(t, 10*time.Second, "the peer to fill", func() bool { return pc.Stats().Sent >= 5 })
				closeAndCheck(t, pc.Close, pc)
				if st := pc.Stats(); st.Sent+st.WriteErrors != uint64(taken) {
					t.Fatalf("%d datagrams taken, stats %+v: want each sent or counted", taken, st)
				}
				if err := <-h.closed; err != nil {
					t.Fatalf("OnPacketClose: %v", err)
				}
			})
		}
	})
}

// closeAndCheck closes a socket whose peer never reads: Close returns at
// once, and the socket finishes closing within a few seconds.
func closeAndCheck(t *testing.T, closeFn func() error, pc *conn.PacketConn) {
	t.Helper()
	start := time.Now()
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("Close took %v", el)
	}
	select {
	case <-pc.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("the socket did not finish closing: %+v", pc.Stats())
	}
}
