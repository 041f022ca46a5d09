package conn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
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

// ctDgramModes are the ways a loop receives datagrams: io_uring's
// multishot RECVMSG, and epoll's poll, then recvmmsg(2).
func ctDgramModes(t *testing.T, f func(t *testing.T, b loop.Backend, opts ...loop.Option)) {
	t.Helper()
	modes := []struct {
		name string
		b    loop.Backend
		opts []loop.Option
	}{
		{"backend=uring", loop.BackendUring, nil},
		{"backend=epoll", loop.BackendEpoll, nil},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			if m.b == loop.BackendUring {
				testutil.SkipIfNoUring(t)
			}
			testutil.Watchdog(t, 60*time.Second)
			f(t, m.b, m.opts...)
		})
	}
}

// packetRecorder is a PacketHandler that echoes (when echo is set) and
// records errors and the close.
type packetRecorder struct {
	echo    bool
	mu      sync.Mutex
	errs    []error
	closed  chan error
	offLoop int
	got     int
}

func newPacketRecorder(echo bool) *packetRecorder {
	return &packetRecorder{echo: echo, closed: make(chan error, 1)}
}

func (r *packetRecorder) OnPacket(pc *conn.PacketConn, data []byte, from conn.Addr) {
	r.mu.Lock()
	if !pc.Loop().InLoop() {
		r.offLoop++
	}
	r.got++
	r.mu.Unlock()
	if r.echo {
		if _, err := pc.WriteToAddr(data, from); err != nil {
			r.OnPacketError(pc, err)
		}
	}
}

func (r *packetRecorder) OnPacketError(pc *conn.PacketConn, err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *packetRecorder) OnPacketClose(pc *conn.PacketConn, err error) { r.closed <- err }

func (r *packetRecorder) errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// ctDialReceiver dials a PacketConn on g (opts applied) to a new
// net.UDPConn on loopback, the receiver; both close when the test ends.
// Only the dial can fail (err), so a test can skip on what it returns.
func ctDialReceiver(t *testing.T, g *loop.Group, opts ...conn.Option) (*net.UDPConn, *conn.PacketConn, error) {
	t.Helper()
	rx := ctUDP4(t)
	pc, err := conn.DialPacket(context.Background(), g, "udp4", rx.LocalAddr().String(), newPacketRecorder(false), opts...)
	if err != nil {
		return rx, nil, err
	}
	t.Cleanup(func() { pc.Close(); <-pc.Done() })
	return rx, pc, nil
}

// ctGoneUDPAddr returns a loopback UDP address nothing listens on (a
// socket bound there and closed): datagrams to it draw an ICMP port
// unreachable.
func ctGoneUDPAddr(t *testing.T) *net.UDPAddr {
	t.Helper()
	gone, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	return gone.LocalAddr().(*net.UDPAddr)
}

func ctListenPacket(t *testing.T, g *loop.Group, network, addr string, h conn.PacketHandler, opts ...conn.Option) *conn.PacketConn {
	t.Helper()
	pc, err := conn.ListenPacket(context.Background(), g, network, addr, h, opts...)
	if err != nil {
		t.Fatalf("ListenPacket(%s, %s): %v", network, addr, err)
	}
	t.Cleanup(func() { pc.Close(); <-pc.Done() })
	return pc
}

// TestPacketEcho: a ListenPacket server echoes datagrams of every size it
// can hold to a net.UDPConn and to a DialPacket client, intact and in
// order; a datagram too long is reported as truncated and not echoed.
func TestPacketEcho(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 2, append([]loop.Option{loop.WithDatagramBuffers(64, 4096)}, opts...)...)
		srvH := newPacketRecorder(true)
		srv := ctListenPacket(t, g, "udp4", "127.0.0.1:0", srvH)
		if srv.MaxDatagram() != 4096-128 {
			t.Fatalf("MaxDatagram %d", srv.MaxDatagram())
		}
		c, err := net.DialUDP("udp4", nil, srv.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 65536)
		for i, n := range []int{0, 1, 64, 1472, srv.MaxDatagram()} {
			msg := bytes.Repeat([]byte{byte(i + 1)}, n)
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := c.Read(buf)
			if err != nil || !bytes.Equal(buf[:got], msg) {
				t.Fatalf("echo of %d B: %d B, %v", n, got, err)
			}
		}
		// Too long for the loop's buffers: reported, not delivered.
		if _, err := c.Write(make([]byte, srv.MaxDatagram()+1)); err != nil {
			t.Fatal(err)
		}
		ctWaitFor(t, 5*time.Second, "the truncation report", func() bool { return len(srvH.errors()) == 1 })
		var de *conn.DatagramError
		if err := srvH.errors()[0]; !errors.As(err, &de) || !errors.Is(err, conn.ErrTruncated) || de.Len != srv.MaxDatagram()+1 ||
			de.Addr.AddrPort() != c.LocalAddr().(*net.UDPAddr).AddrPort() {
			t.Fatalf("truncation reported as %v (%+v)", err, de)
		}
		// A send's completion may reach the loop after its datagram
		// reached the client.
		ctWaitFor(t, 5*time.Second, "the last send's completion", func() bool { return srv.Stats().Sent >= 5 })
		if st := srv.Stats(); st.Truncated != 1 || st.Received != 5 || st.Sent != 5 {
			t.Fatalf("server stats %+v", st)
		}

		// A ringloop client: Write to the connected peer.
		cliH := &chanPackets{ch: make(chan []byte, 16)}
		cli, err := conn.DialPacket(context.Background(), g, "udp4", srv.LocalAddr().String(), cliH)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			msg := bytes.Repeat([]byte{byte(i)}, 100+i)
			if _, err := cli.Write(msg); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-cliH.ch:
				if !bytes.Equal(got, msg) {
					t.Fatalf("client echo %d: %d B", i, len(got))
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no echo for the DialPacket client")
			}
		}
		if err := cli.Close(); err != nil {
			t.Fatal(err)
		}
		<-cli.Done()
		if _, err := cli.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write after Close: %v", err)
		}
		if err := cli.Close(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("second Close: %v", err)
		}
		if srvH.offLoop != 0 {
			t.Fatalf("%d OnPacket calls off the loop", srvH.offLoop)
		}
	})
}

// chanPackets sends a copy of every datagram to ch.
type chanPackets struct{ ch chan []byte }

func (c *chanPackets) OnPacket(pc *conn.PacketConn, data []byte, from conn.Addr) {
	c.ch <- append([]byte(nil), data...)
}

// TestPacketErrors: errors that leave the socket open reach
// OnPacketError: ECONNREFUSED on a connected socket whose peer is gone,
// EMSGSIZE for a datagram UDP cannot carry; the socket still works after.
func TestPacketErrors(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, opts...)
		gone := ctGoneUDPAddr(t)
		addr := gone.String()
		h := newPacketRecorder(false)
		pc, err := conn.DialPacket(context.Background(), g, "udp4", addr, h)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { pc.Close(); <-pc.Done() }()
		ctWriteUntilErr(t, pc, h, syscall.ECONNREFUSED)
		if _, err := pc.Write(make([]byte, 70000)); err != nil {
			t.Fatalf("Write of 70000 B: %v (the kernel's verdict goes to OnPacketError)", err)
		}
		ctWaitFor(t, 5*time.Second, "EMSGSIZE", func() bool { return hasErr(h.errors(), syscall.EMSGSIZE) })
		// Still open, and serving: a peer appears at the address.
		back, err := net.ListenUDP("udp4", gone)
		if err != nil {
			t.Skipf("the port was taken meanwhile: %v", err)
		}
		defer back.Close()
		if _, err := pc.Write([]byte("hello again")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		back.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, _, err := back.ReadFrom(buf); err != nil || string(buf[:n]) != "hello again" {
			t.Fatalf("after the errors: %q, %v", buf[:n], err)
		}
		if st := pc.Stats(); st.WriteErrors+st.ReadErrors == 0 {
			t.Fatalf("errors not counted: %+v", st)
		}
	})
}

// ctWriteUntilErr writes to pc's peer until h has recorded an error
// matching target, failing the test after 10 s.
func ctWriteUntilErr(t *testing.T, pc *conn.PacketConn, h interface{ errors() []error }, target error) {
	t.Helper()
	if !testutil.Eventually(10*time.Second, func() bool {
		if hasErr(h.errors(), target) {
			return true
		}
		pc.Write([]byte("is anyone there?"))
		return false
	}) {
		t.Fatalf("no %v; errors %v", target, h.errors())
	}
}

func hasErr(errs []error, target error) bool {
	for _, e := range errs {
		if errors.Is(e, target) {
			return true
		}
	}
	return false
}

// TestPacketUnixgram: a unixgram server echoes to a DialPacket client (its
// socket autobound, so that the reply finds it) and to a named net client;
// Close removes the server's path.
func TestPacketUnixgram(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, opts...)
		dir := t.TempDir()
		path := filepath.Join(dir, "srv.sock")
		srv, err := conn.ListenPacket(context.Background(), g, "unixgram", path, newPacketRecorder(true))
		if err != nil {
			t.Fatal(err)
		}
		cliH := &chanPackets{ch: make(chan []byte, 4)}
		cli, err := conn.DialPacket(context.Background(), g, "unixgram", path, cliH)
		if err != nil {
			t.Fatal(err)
		}
		cli.Write([]byte("over unixgram"))
		select {
		case got := <-cliH.ch:
			if string(got) != "over unixgram" {
				t.Fatalf("echo %q", got)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no unixgram echo")
		}
		nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "cli.sock"), Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.WriteTo([]byte("named"), &net.UnixAddr{Name: path, Net: "unixgram"}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, _, err := nc.ReadFrom(buf); err != nil || string(buf[:n]) != "named" {
			t.Fatalf("named echo %q, %v", buf[:n], err)
		}
		cli.Close()
		srv.Close()
		<-srv.Done()
		<-cli.Done()
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("server path left after Close: %v", err)
		}
	})
}

// TestPacketGroupShutdown: a group shutting down closes its datagram
// sockets with net.ErrClosed.
func TestPacketGroupShutdown(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g, err := loop.NewGroup(append([]loop.Option{loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(ctLogger)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		h := newPacketRecorder(true)
		pc, err := conn.ListenPacket(context.Background(), g, "udp", "127.0.0.1:0", h)
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			pc.WriteToAddrPort([]byte("queued at shutdown"), pc.LocalAddr().(*net.UDPAddr).AddrPort())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-h.closed:
			if !errors.Is(err, net.ErrClosed) {
				t.Fatalf("OnPacketClose(%v), want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no OnPacketClose after the group shut down")
		}
		<-pc.Done()
		if err := pc.Close(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Close after the shutdown: %v", err)
		}
	})
}

func TestPacketBadInput(t *testing.T) {
	g := ctGroup(t, loop.BackendEpoll, 1)
	h := newPacketRecorder(false)
	for _, tc := range []struct{ network, addr string }{
		{"tcp", "127.0.0.1:0"}, {"udp", "no-such-host.invalid:1"}, {"udp4", "[::1]:0"}, {"unixgram", ""},
	} {
		if pc, err := conn.ListenPacket(context.Background(), g, tc.network, tc.addr, h); err == nil {
			pc.Close()
			t.Errorf("ListenPacket(%q, %q) succeeded", tc.network, tc.addr)
		}
	}
	if _, err := conn.ListenPacket(context.Background(), g, "udp", "127.0.0.1:0", nil); err == nil {
		t.Error("ListenPacket with a nil handler succeeded")
	}
	small := ctGroup(t, loop.BackendEpoll, 1, loop.WithDatagramBuffers(16, 64))
	if _, err := conn.ListenPacket(context.Background(), small, "udp", "127.0.0.1:0", h); !errors.Is(err, conn.ErrInvalidOption) {
		t.Errorf("ListenPacket on 64-byte buffers: %v, want ErrInvalidOption", err)
	}
	pc := ctListenPacket(t, g, "udp4", "127.0.0.1:0", h)
	if _, err := pc.Write([]byte("x")); !errors.Is(err, conn.ErrNotConnected) {
		t.Errorf("Write on an unconnected socket: %v", err)
	}
	if _, err := pc.WriteTo([]byte("x"), &net.TCPAddr{}); err == nil {
		t.Error("WriteTo a TCP address succeeded")
	}
	if _, err := pc.WriteTo([]byte("x"), &net.UDPAddr{IP: net.ParseIP("2001:db8::1"), Port: 9}); err == nil {
		t.Error("WriteTo an IPv6 address on a udp4 socket succeeded")
	}
	if _, err := pc.WriteToAddr([]byte("x"), conn.UnixAddr("/tmp/x")); err == nil {
		t.Error("WriteToAddr a Unix address on a UDP socket succeeded")
	}
	if _, err := conn.ListenPacket(context.Background(), g, "udp", "127.0.0.1:0", h, conn.WithDatagramQueue(-1)); !errors.Is(err, conn.ErrInvalidOption) {
		t.Errorf("WithDatagramQueue(-1): %v", err)
	}
}

// TestPacketEchoAllocs: the server's echo path (OnPacket, WriteToAddr,
// the flush and the SENDMSG's completion) allocates nothing per datagram.
func TestPacketEchoAllocs(t *testing.T) {
	if accRace {
		t.Skip("the race detector allocates")
	}
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		g := ctGroup(t, b, 1, opts...)
		srv := ctListenPacket(t, g, "udp4", "127.0.0.1:0", newPacketRecorder(true))
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		ap := srv.LocalAddr().(*net.UDPAddr).AddrPort()
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
			t.Fatal(err)
		}
		tv := unix.NsecToTimeval(int64(5 * time.Second))
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		msg, in := make([]byte, 64), make([]byte, 128)
		echo := func() {
			_, err := unix.Write(fd, msg)
			for err == unix.EINTR { // the runtime's preemption signals
				_, err = unix.Write(fd, msg)
			}
			if err != nil {
				t.Fatal(err)
			}
			n, err := unix.Read(fd, in)
			for err == unix.EINTR {
				n, err = unix.Read(fd, in)
			}
			if err != nil || n != len(msg) {
				t.Fatalf("echo: %d, %v", n, err)
			}
		}
		for range 2000 { // warm up: buffers, records, free lists
			echo()
		}
		if avg := testing.AllocsPerRun(5000, echo); avg != 0 {
			t.Fatalf("%.3f allocations per datagram echoed, want 0", avg)
		}
	})
}

// TestPacketManyPeers: one server socket echoes to 10,000 distinct peers
// (each a socket of its own, on addresses across 127.0.0.0/8), and every
// reply reaches the peer that asked.
func TestPacketManyPeers(t *testing.T) {
	const peers, workers = 10_000, 4
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, opts...)
		srv := ctListenPacket(t, g, "udp4", "0.0.0.0:0", newPacketRecorder(true), conn.WithReadBuffer(4<<20))
		port := srv.LocalAddr().(*net.UDPAddr).Port
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 64)
				for i := w; i < peers; i += workers {
					ip := net.IPv4(127, byte(1+i/60000), byte(i/250), byte(1+i%250))
					c, err := net.DialUDP("udp4", &net.UDPAddr{IP: ip}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
					if err != nil {
						errs <- fmt.Errorf("peer %d: %w", i, err)
						return
					}
					msg := []byte(fmt.Sprintf("peer %d at %v", i, c.LocalAddr()))
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					_, err = c.Write(msg)
					n := 0
					if err == nil {
						n, err = c.Read(buf)
					}
					c.Close()
					if err != nil || string(buf[:n]) != string(msg) {
						errs <- fmt.Errorf("peer %d: echo %q, %v", i, buf[:n], err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		ctWaitFor(t, 5*time.Second, "the last send's completion", func() bool { return srv.Stats().Sent >= peers })
		if st := srv.Stats(); st.Received != peers || st.Sent != peers {
			t.Errorf("server stats %+v, want %d received and sent", st, peers)
		}
	})
}

// TestPacketQueueFull: writes past WithDatagramQueue fail with
// ErrQueueFull and are counted; the queued ones still go out.
func TestPacketQueueFull(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		g := ctGroup(t, b, 1, opts...)
		rx, pc, err := ctDialReceiver(t, g, conn.WithDatagramQueue(4))
		if err != nil {
			t.Fatal(err)
		}
		full := make(chan int, 1)
		// On the loop, the queue is flushed only at the end of the turn:
		// the fifth write of the turn finds it full.
		pc.Loop().Execute(func() {
			n := 0
			for i := range 10 {
				if _, err := pc.Write([]byte{byte(i)}); errors.Is(err, conn.ErrQueueFull) {
					n++
				}
			}
			full <- n
		})
		if n := <-full; n != 6 {
			t.Fatalf("%d writes refused, want 6", n)
		}
		buf := make([]byte, 8)
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		for i := range 4 {
			if n, err := rx.Read(buf); err != nil || n != 1 || buf[0] != byte(i) {
				t.Fatalf("datagram %d: %v %v", i, buf[:n], err)
			}
		}
		if st := pc.Stats(); st.QueueFull != 6 {
			t.Fatalf("QueueFull %d, want 6", st.QueueFull)
		}
	})
}

// TestPacketRebuild: datagrams keep being echoed, whole and in order,
// while the loop rebuilds its ring (or epoll instance) under them.
func TestPacketRebuild(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, opts...)
		srv := ctListenPacket(t, g, "udp4", "127.0.0.1:0", newPacketRecorder(true), conn.WithReadBuffer(1<<20))
		c, err := net.DialUDP("udp4", nil, srv.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadBuffer(1 << 20)
		const total, window = 3000, 8
		buf := make([]byte, 64)
		sent := 0
		for recv := 0; recv < total; recv++ {
			for sent < total && sent-recv < window {
				c.Write([]byte(fmt.Sprintf("datagram %d", sent)))
				sent++
				if sent%100 == 0 {
					testknobs.RebuildRings(g)
				}
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := c.Read(buf)
			if want := fmt.Sprintf("datagram %d", recv); err != nil || string(buf[:n]) != want {
				t.Fatalf("echo %q, %v; want %q (rebuilds %d)", buf[:n], err, want, g.Stats().Total.Rebuilds)
			}
		}
		if st := g.Stats().Total; st.Rebuilds == 0 || st.LostCompletions != 0 || st.StaleCompletions != 0 {
			t.Fatalf("loop stats after the rebuilds: %+v", st)
		}
	})
}

// TestPacketSocketOptions: SetReadBuffer and SetWriteBuffer reach the
// socket (the kernel reports twice the size asked for), SyscallConn's
// Control runs on the socket's fd, and all of them fail with
// net.ErrClosed once the socket is closed, never touching a reused fd.
func TestPacketSocketOptions(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		g := ctGroup(t, b, 1, opts...)
		np, err := conn.ListenPacketNet(context.Background(), g, "udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		// What quic-go and similar users probe a net.PacketConn for.
		var _ interface {
			SetReadBuffer(int) error
			SetWriteBuffer(int) error
			SyscallConn() (syscall.RawConn, error)
		} = np
		if err := np.SetReadBuffer(16384); err != nil {
			t.Fatalf("SetReadBuffer: %v", err)
		}
		if err := np.SetWriteBuffer(20480); err != nil {
			t.Fatalf("SetWriteBuffer: %v", err)
		}
		if err := np.SetReadBuffer(-1); err == nil {
			t.Fatal("SetReadBuffer(-1) succeeded")
		}
		rc, err := np.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var rcv, snd int
		var port int
		if err := rc.Control(func(fd uintptr) {
			rcv, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
			snd, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
			if sa, err := unix.Getsockname(int(fd)); err == nil {
				port = sa.(*unix.SockaddrInet4).Port
			}
		}); err != nil {
			t.Fatalf("Control: %v", err)
		}
		if rcv != 2*16384 || snd != 2*20480 {
			t.Errorf("SO_RCVBUF %d, SO_SNDBUF %d; want %d and %d", rcv, snd, 2*16384, 2*20480)
		}
		if port != np.LocalAddr().(*net.UDPAddr).Port {
			t.Errorf("Control ran on a socket bound to port %d, not the PacketConn's %v", port, np.LocalAddr())
		}
		if err := rc.Read(func(uintptr) bool { t.Error("RawConn.Read ran its function"); return true }); err == nil {
			t.Error("RawConn.Read succeeded: the loop owns the socket's reads")
		}
		np.Close()
		<-np.PacketConn().Done()
		if err := np.SetReadBuffer(16384); !errors.Is(err, net.ErrClosed) {
			t.Errorf("SetReadBuffer after Close: %v, want net.ErrClosed", err)
		}
		if err := rc.Control(func(uintptr) { t.Error("Control ran after Close") }); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Control after Close: %v, want net.ErrClosed", err)
		}
	})
}
