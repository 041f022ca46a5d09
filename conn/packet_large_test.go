package conn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// dgramCopies is a PacketHandler that hands a copy of each datagram, and
// each error, to the test.
type dgramCopies struct {
	got  chan []byte
	errs chan error
}

func newDgramCopies() *dgramCopies {
	return &dgramCopies{got: make(chan []byte, 16), errs: make(chan error, 16)}
}

func (h *dgramCopies) OnPacket(pc *conn.PacketConn, data []byte, from conn.Addr) {
	h.got <- bytes.Clone(data)
}

func (h *dgramCopies) OnPacketError(pc *conn.PacketConn, err error) {
	select {
	case h.errs <- err:
	default:
	}
}

// largeDgramNets are the networks TestPacketLargeDatagrams runs on, each
// with the longest datagram it carries over loopback.
var largeDgramNets = []struct {
	network, addr string
	longest       int
}{
	{"udp4", "127.0.0.1:0", 65_507},
	{"udp6", "[::1]:0", 65_527},
	{"unixgram", "", 65_535},
}

// TestPacketLargeDatagrams: on a group with the default buffers, datagrams
// of 10 KB, 32 KiB and the longest the network carries arrive whole,
// byte for byte, through the callback PacketConn (ListenPacket) and
// through the net.PacketConn adapter, listening and dialed (ListenPacketNet
// read with a 64 KiB buffer, DialPacketNet with Read), over UDP/IPv4,
// UDP/IPv6 and Unix datagram sockets.
func TestPacketLargeDatagrams(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		g := ctGroup(t, b, 1, opts...)
		for _, nw := range largeDgramNets {
			t.Run(nw.network, func(t *testing.T) {
				addr := nw.addr
				if nw.network == "unixgram" {
					addr = fmt.Sprintf("@ringloop-large-%d-%d", os.Getpid(), unixgramPeers.Add(1))
				}
				peer, err := net.ListenPacket(nw.network, addr)
				if err != nil {
					t.Skipf("%s unavailable: %v", nw.network, err)
				}
				defer peer.Close()
				if nw.network == "unixgram" {
					// A Unix datagram must fit the sender's send buffer.
					peer.(*net.UnixConn).SetWriteBuffer(1 << 20)
				}
				sizes := append(largeDgramSizes[:2:2], nw.longest)
				// sendAll sends every size from peer to to.
				sendAll := func(t *testing.T, to net.Addr) {
					t.Helper()
					for i, n := range sizes {
						if _, err := peer.WriteTo(largeDgram(i, n), to); err != nil {
							t.Fatalf("WriteTo of %d bytes: %v", n, err)
						}
					}
				}

				t.Run("api=handler", func(t *testing.T) {
					h := newDgramCopies()
					laddr := nw.addr
					if nw.network == "unixgram" {
						laddr = fmt.Sprintf("@ringloop-large-%d-%d", os.Getpid(), unixgramPeers.Add(1))
					}
					pc := ctListenPacket(t, g, nw.network, laddr, h)
					if pc.MaxDatagram() < 65_535 {
						t.Fatalf("MaxDatagram %d on the default buffers", pc.MaxDatagram())
					}
					sendAll(t, pc.LocalAddr())
					for i, n := range sizes {
						select {
						case got := <-h.got:
							if !bytes.Equal(got, largeDgram(i, n)) {
								t.Fatalf("datagram %d: %d B, want the %d B sent", i, len(got), n)
							}
						case err := <-h.errs:
							t.Fatalf("datagram %d (%d B): %v", i, n, err)
						case <-time.After(5 * time.Second):
							t.Fatalf("datagram %d (%d B) never arrived: %+v", i, n, pc.Stats())
						}
					}
				})

				t.Run("api=net", func(t *testing.T) {
					laddr := nw.addr
					if nw.network == "unixgram" {
						laddr = fmt.Sprintf("@ringloop-large-%d-%d", os.Getpid(), unixgramPeers.Add(1))
					}
					np := ctListenNet(t, g, nw.network, laddr)
					sendAll(t, np.LocalAddr())
					buf := make([]byte, 64<<10)
					for i, n := range sizes {
						np.SetReadDeadline(time.Now().Add(5 * time.Second))
						got, from, err := np.ReadFrom(buf)
						if err != nil || got != min(n, len(buf)) || !bytes.Equal(buf[:got], largeDgram(i, n)[:got]) {
							t.Fatalf("ReadFrom: %d B, %v; want the %d B sent (%+v)", got, err, n, np.PacketConn().Stats())
						}
						if from.String() != peer.LocalAddr().String() {
							t.Fatalf("source %v, want %v", from, peer.LocalAddr())
						}
					}
					if d := np.Dropped(); d != 0 {
						t.Fatalf("Dropped %d", d)
					}
				})

				t.Run("api=dialnet", func(t *testing.T) {
					if nw.network == "unixgram" {
						t.Skip("the peer replies to an autobound name: covered by api=net")
					}
					c, err := conn.DialPacketNet(context.Background(), g, nw.network, peer.LocalAddr().String())
					if err != nil {
						t.Fatal(err)
					}
					defer func() { c.Close(); <-c.PacketConn().Done() }()
					sendAll(t, c.LocalAddr())
					buf := make([]byte, 64<<10)
					for i, n := range sizes {
						c.SetReadDeadline(time.Now().Add(5 * time.Second))
						got, err := c.Read(buf)
						if err != nil || got != n || !bytes.Equal(buf[:got], largeDgram(i, n)) {
							t.Fatalf("Read: %d B, %v; want the %d B sent", got, err, n)
						}
					}
				})
			})
		}
	})
}

// TestPacketTruncatedLoggedOnce: datagrams longer than the loop's
// datagram buffers (made small here) are dropped; each socket logs the
// first one once, with its length and the socket's limit, counts every
// one in Truncated and, under a NetPacketConn, in Dropped without
// counting it twice in the socket's stats; the datagrams that fit still
// arrive, in order.
func TestPacketTruncatedLoggedOnce(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		rec := &lgRecorder{}
		g := ctGroup(t, b, 1, append([]loop.Option{loop.WithDatagramBuffers(16, 4096), loop.WithLogger(slog.New(rec))}, opts...)...)
		tx := ctUDP4(t)
		h := newDgramCopies()
		pc := ctListenPacket(t, g, "udp4", "127.0.0.1:0", h)
		np := ctListenNet(t, g, "udp4", "127.0.0.1:0")
		const long = 3
		big := make([]byte, pc.MaxDatagram()+1)
		for _, to := range []net.Addr{pc.LocalAddr(), np.LocalAddr()} {
			for range long {
				if _, err := tx.WriteTo(big, to); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := tx.WriteTo([]byte("fits"), to); err != nil {
				t.Fatal(err)
			}
		}

		// The socket's handler: every long one reported, then the short.
		for i := range long {
			select {
			case err := <-h.errs:
				var de *conn.DatagramError
				if !errors.Is(err, conn.ErrTruncated) || !errors.As(err, &de) || de.Len != len(big) {
					t.Fatalf("error %d: %v, want ErrTruncated with the whole length", i, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("truncated datagram %d not reported", i)
			}
		}
		select {
		case got := <-h.got:
			if string(got) != "fits" {
				t.Fatalf("got %q", got)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the short datagram never arrived")
		}

		// The adapter: the long ones dropped, the short one read.
		buf := make([]byte, 64<<10)
		np.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, _, err := np.ReadFrom(buf); err != nil || string(buf[:n]) != "fits" {
			t.Fatalf("ReadFrom: %q, %v", buf[:n], err)
		}
		if st := pc.Stats(); st.Truncated != long || st.Dropped != 0 || st.Received != 1 {
			t.Fatalf("handler socket: Truncated %d, Dropped %d, Received %d; want %d, 0, 1", st.Truncated, st.Dropped, st.Received, long)
		}
		if st := np.PacketConn().Stats(); st.Truncated != long || st.Dropped != 0 || np.Dropped() != long {
			t.Fatalf("adapter: Truncated %d, Stats().Dropped %d, Dropped() %d; want %d, 0, %d", st.Truncated, st.Dropped, np.Dropped(), long, long)
		}

		// One record per socket, naming it, the length and the limit.
		const msg = "conn: datagram dropped: longer than the loop's datagram buffers hold (loop.WithDatagramBuffers); later ones are only counted in Truncated"
		seen := map[string]int{}
		rec.mu.Lock()
		recs := append([]slog.Record(nil), rec.recs...)
		rec.mu.Unlock()
		for _, r := range recs {
			if r.Message != msg {
				continue
			}
			if r.Level != slog.LevelWarn {
				t.Errorf("level %v, want WARN", r.Level)
			}
			local, _ := lgAttr(r, "local")
			n, _ := lgAttr(r, "len")
			limit, _ := lgAttr(r, "max")
			if n.Int64() != int64(len(big)) || limit.Int64() != int64(pc.MaxDatagram()) {
				t.Errorf("len %v, max %v; want %d, %d", n, limit, len(big), pc.MaxDatagram())
			}
			seen[local.String()]++
		}
		for _, a := range []net.Addr{pc.LocalAddr(), np.LocalAddr()} {
			if seen[a.String()] != 1 {
				t.Errorf("socket %v logged %d times, want once (records: %v)", a, seen[a.String()], seen)
			}
		}
	})
}

// TestNetPacketConnLargeInbound: a NetPacketConn charges a queued datagram
// its length, not the loop's 68 KiB buffer it arrived in: the default
// 1 MiB inbound bound holds 15 datagrams of 65,507 bytes, and only the
// 16th, with no room left, is dropped (counted in Stats().Dropped, not in
// Truncated). Every one kept is read whole, in order.
func TestNetPacketConnLargeInbound(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		g := ctGroup(t, b, 1, opts...)
		np := ctListenNet(t, g, "udp4", "127.0.0.1:0")
		tx := ctUDP4(t)
		const n, kept = 65_507, 15
		for i := range kept + 1 {
			if _, err := tx.WriteTo(largeDgram(i, n), np.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			// One at a time, each taken from the socket before the next
			// goes, so that the socket's own buffer never drops one.
			ctWaitFor(t, 5*time.Second, "the datagram received", func() bool {
				return np.PacketConn().Stats().Received == uint64(i+1) // kept or dropped
			})
		}
		if st := np.PacketConn().Stats(); st.Dropped != 1 || st.Truncated != 0 || np.Dropped() != 1 {
			t.Fatalf("Dropped %d, Truncated %d, NetPacketConn.Dropped %d; want 1, 0, 1", st.Dropped, st.Truncated, np.Dropped())
		}
		buf := make([]byte, 64<<10)
		for i := range kept {
			np.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, _, err := np.ReadFrom(buf)
			if err != nil || got != n || !bytes.Equal(buf[:got], largeDgram(i, n)) {
				t.Fatalf("datagram %d: %d B, %v; want the %d B sent", i, got, err, n)
			}
		}
	})
}
