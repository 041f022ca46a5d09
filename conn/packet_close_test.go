package conn_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// TestPacketCloseFlushesQueue: Close after more datagrams were queued than
// may be in flight at once still hands every one of them to the kernel,
// then closes the socket (Done), the receiver getting them all.
func TestPacketCloseFlushesQueue(t *testing.T) {
	const total = 1000 // maxSendsInFlight is 256
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, opts...)
		rx, pc, err := ctDialReceiver(t, g, conn.WithDatagramQueue(total))
		if err != nil {
			t.Fatal(err)
		}
		rx.SetReadBuffer(4 << 20)
		queued := make(chan error, 1)
		// On the loop: the flush runs only after the turn, so all of them
		// are queued when Close starts it.
		pc.Loop().Execute(func() {
			for i := range total {
				if _, err := pc.Write(fmt.Appendf(nil, "%d", i)); err != nil {
					queued <- err
					return
				}
			}
			queued <- pc.Close()
		})
		if err := <-queued; err != nil {
			t.Fatal(err)
		}
		select {
		case <-pc.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("Close with %d datagrams queued did not finish: %+v", total, pc.Stats())
		}
		buf := make([]byte, 64)
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		for i := range total {
			n, err := rx.Read(buf)
			if err != nil {
				t.Fatalf("datagram %d of %d: %v (socket stats %+v)", i, total, err, pc.Stats())
			}
			if got, want := string(buf[:n]), fmt.Sprint(i); got != want {
				t.Fatalf("datagram %d: %q", i, got)
			}
		}
		if st := pc.Stats(); st.Sent != total {
			t.Fatalf("Stats: %+v, want %d sent", st, total)
		}
	})
}

// TestPacketOpenDuringShutdown: sockets opened while their group shuts
// down either fail to open or close with it, each fd closed once (-race
// sees the open and the shutdown hook touch the socket from one goroutine
// only), and nothing leaks.
func TestPacketOpenDuringShutdown(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		total, failed := 0, 0
		for range 20 {
			g := ctGroup(t, b, 1, opts...)
			var opened []*conn.PacketConn
			failed += openDuringShutdown(t, g, 5000, func() error {
				pc, err := conn.ListenPacket(context.Background(), g, "udp4", "127.0.0.1:0", newPacketRecorder(false))
				if err == nil {
					opened = append(opened, pc)
				}
				return err
			})
			for _, pc := range opened {
				select {
				case <-pc.Done():
				case <-time.After(5 * time.Second):
					t.Fatalf("a socket opened during the shutdown never closed: %v", pc.LocalAddr())
				}
			}
			total += len(opened)
		}
		t.Logf("%d sockets opened and closed by the shutdown; %d opens refused", total, failed)
		if failed == 0 {
			t.Fatal("no open met the shutdown: the test proves nothing")
		}
	})
}

// openDuringShutdown calls open on a goroutine, up to limit times until it
// fails, while g shuts down (once open has succeeded once), and returns
// 1 if an open failed (met the shutdown), else 0. open's state is the
// caller's to read once it returns.
func openDuringShutdown(t *testing.T, g *loop.Group, limit int, open func() error) int {
	t.Helper()
	first := make(chan struct{})
	var once sync.Once
	refused := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer once.Do(func() { close(first) })
		for range limit {
			if err := open(); err != nil {
				refused = 1
				return
			}
			once.Do(func() { close(first) })
		}
	}()
	<-first
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	<-done
	return refused
}

// TestPacketRearmRetry: when the loop cannot take the socket's receive
// again (its op table full), the socket reports it, keeps its fd and arms
// the receive again shortly; it does not close.
func TestPacketRearmRetry(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, append([]loop.Option{testknobs.MaxOps(4).(loop.Option)}, opts...)...)
		addr := ctGoneUDPAddr(t).String()
		idle, _ := testutil.SocketPair(t)
		h := &hogOnRefused{packetRecorder: newPacketRecorder(false), fd: idle}
		pc, err := conn.DialPacket(context.Background(), g, "udp4", addr, h)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { pc.Close(); <-pc.Done() }()
		// ECONNREFUSED ends the receive; the handler then takes every
		// free op, so the socket cannot arm it again.
		ctWriteUntilErr(t, pc, h, loop.ErrTooManyOps)
		h.release(pc.Loop())
		// Armed again: the next refusal arrives too.
		refused := h.refusals()
		if !testutil.Eventually(10*time.Second, func() bool {
			if h.refusals() != refused {
				return true
			}
			pc.Write([]byte("anyone now?"))
			return false
		}) {
			t.Fatalf("no receive after the op table freed up; errors %v, stats %+v", h.errors(), pc.Stats())
		}
		select {
		case err := <-h.closed:
			t.Fatalf("the socket closed: %v", err)
		default:
		}
	})
}

// hogOnRefused records errors and, at the first ECONNREFUSED, fills the
// loop's op table with receives on an idle socket (fd, which the test
// sets) until release cancels them.
type hogOnRefused struct {
	*packetRecorder
	fd      int
	buf     [1]byte
	mu      sync.Mutex
	hogs    []loop.OpID
	hogged  bool
	refused int
}

type nopCompleter struct{}

func (nopCompleter) Complete(*loop.Completion) {}

func (h *hogOnRefused) OnPacketError(pc *conn.PacketConn, err error) {
	h.packetRecorder.OnPacketError(pc, err)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refused++
	if h.hogged {
		return
	}
	h.hogged = true
	for {
		id, err := pc.Loop().IO().Recv(h.fd, h.buf[:], 0, nopCompleter{})
		if err != nil {
			return
		}
		h.hogs = append(h.hogs, id)
	}
}

func (h *hogOnRefused) refusals() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refused
}

func (h *hogOnRefused) release(l *loop.Loop) {
	done := make(chan struct{})
	l.Execute(func() {
		h.mu.Lock()
		for _, id := range h.hogs {
			l.IO().Cancel(id)
		}
		h.hogs = nil
		h.mu.Unlock()
		close(done)
	})
	<-done
}

// TestPacketUnixSourceKind: a datagram from a path and one from the
// abstract name with the same bytes are told apart (the path without '@',
// the abstract one with it), so a reply reaches the right socket.
func TestPacketUnixSourceKind(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		g := ctGroup(t, b, 1, opts...)
		dir := t.TempDir()
		srvPath := filepath.Join(dir, "srv")
		from := make(chan string, 4)
		h := &sourceEcho{from: from}
		srv := ctListenPacket(t, g, "unixgram", srvPath, h)
		_ = srv
		name := filepath.Join(dir, "c")
		byPath, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer byPath.Close()
		byAbstract, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "@" + name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer byAbstract.Close()
		to := &net.UnixAddr{Name: srvPath, Net: "unixgram"}
		buf := make([]byte, 64)
		for _, c := range []struct {
			sock *net.UnixConn
			want string
		}{{byPath, name}, {byAbstract, "@" + name}, {byPath, name}} {
			if _, err := c.sock.WriteTo([]byte("which?"), to); err != nil {
				t.Fatal(err)
			}
			if got := <-from; got != c.want {
				t.Fatalf("source %q, want %q", got, c.want)
			}
			c.sock.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := c.sock.Read(buf); err != nil || string(buf[:n]) != "which?" {
				t.Fatalf("reply to %q: %q, %v", c.want, buf[:n], err)
			}
		}
	})
}

// sourceEcho reports each datagram's source and echoes it there.
type sourceEcho struct{ from chan string }

func (s *sourceEcho) OnPacket(pc *conn.PacketConn, data []byte, from conn.Addr) {
	s.from <- from.String()
	pc.WriteToAddr(data, from)
}

// TestNetPacketConnErrors: on NetPacketConn, an ICMP port unreachable on a
// connected socket fails the next Read with ECONNREFUSED (then reads go
// on), a datagram too long for the loop's buffers is dropped and counted,
// a write with a destination on a connected socket fails with
// net.ErrWriteToConnected, and a destination without an IP reaches this
// host, all as package net's UDP sockets do.
func TestNetPacketConnErrors(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, opts...)
		addr := ctGoneUDPAddr(t)
		c, err := conn.DialPacketNet(context.Background(), g, "udp4", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		buf := make([]byte, 64)
		if _, err := c.Write([]byte("anyone?")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(buf); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("Read after an ICMP port unreachable: %v, want ECONNREFUSED", err)
		}
		// The error was reported once; the socket still serves.
		back, err := net.ListenUDP("udp4", addr)
		if err != nil {
			t.Skipf("the port was taken meanwhile: %v", err)
		}
		defer back.Close()
		if _, err := c.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		back.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, peer, err := back.ReadFrom(buf)
		if err != nil {
			t.Fatal(err)
		}
		back.WriteTo([]byte("hi"), peer)
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "hi" {
			t.Fatalf("Read after the error: %q, %v", buf[:n], err)
		}
		if _, err := c.WriteTo([]byte("x"), addr); !errors.Is(err, net.ErrWriteToConnected) {
			t.Fatalf("WriteTo on a connected socket: %v, want net.ErrWriteToConnected", err)
		}

		// Too long for the loop's datagram buffers (made small here):
		// dropped and counted once, in Truncated, which Dropped adds in.
		small := ctGroup(t, b, 1, append([]loop.Option{loop.WithDatagramBuffers(16, 4096)}, opts...)...)
		srv, err := conn.ListenPacketNet(context.Background(), small, "udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		big := make([]byte, srv.PacketConn().MaxDatagram()+1)
		if _, err := back.WriteTo(big, srv.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		ctWaitFor(t, 5*time.Second, "the long datagram counted", func() bool { return srv.Dropped() == 1 })
		if st := srv.PacketConn().Stats(); st.Truncated != 1 || st.Dropped != 0 {
			t.Fatalf("Truncated %d, Dropped %d; want 1, 0 (the inbound queue dropped nothing)", st.Truncated, st.Dropped)
		}

		// No IP: this host, as package net sends it.
		port := back.LocalAddr().(*net.UDPAddr).Port
		if _, err := srv.WriteTo([]byte("local"), &net.UDPAddr{Port: port}); err != nil {
			t.Fatalf("WriteTo without an IP: %v", err)
		}
		if n, _, err := back.ReadFrom(buf); err != nil || string(buf[:n]) != "local" {
			t.Fatalf("a datagram to no IP: %q, %v", buf[:n], err)
		}
	})
}

// TestPacketControlCloses: a function SyscallConn's Control runs may call
// the socket's methods, Close included; the fd stays open until it
// returns, and is closed after.
func TestPacketControlCloses(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, opts...)
		np, err := conn.ListenPacketNet(context.Background(), g, "udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := np.SyscallConn()
		var inside, during error
		var fd int
		if err := rc.Control(func(f uintptr) {
			fd = int(f)
			inside = np.SetReadBuffer(65536)
			np.Close()
			<-np.PacketConn().Done()
			_, during = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
		}); err != nil {
			t.Fatal(err)
		}
		if inside != nil || during != nil {
			t.Fatalf("inside Control: SetReadBuffer %v; the fd after Close, still inside: %v", inside, during)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			// The number may have been reused by now; it must not be
			// this socket.
			if sa, err := unix.Getsockname(fd); err == nil {
				if in4, ok := sa.(*unix.SockaddrInet4); ok && in4.Port == np.LocalAddr().(*net.UDPAddr).Port {
					t.Fatalf("fd %d still open after Control returned", fd)
				}
			}
		} else if err != nil && !errors.Is(err, unix.EBADF) && !errors.Is(err, os.ErrClosed) {
			t.Fatalf("fstat: %v", err)
		}
	})
}

// TestCloseWithFullTaskQueue: with a bounded task queue that is full,
// Close (of a stream connection and of a datagram socket, from outside the
// loop) still closes once the loop drains its queue; it is not lost.
func TestCloseWithFullTaskQueue(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, loop.WithMaxPendingTasks(2))
		h := ctNewServerHandler(t, nil)
		srv := ctListen(t, "tcp4", "127.0.0.1:0", g, h)
		_, sc, ev := ctDialAccepted(t, srv, h)
		_, pc, err := ctDialReceiver(t, g)
		if err != nil {
			t.Fatal(err)
		}
		l := g.Loop(0)
		block, running := make(chan struct{}), make(chan struct{})
		if err := l.Execute(func() { close(running); <-block }); err != nil {
			t.Fatal(err)
		}
		<-running // the loop is in it: nothing leaves the queue now
		for l.Execute(func() {}) == nil {
		}
		if err := sc.Close(); err != nil {
			t.Fatalf("Conn.Close with the task queue full: %v", err)
		}
		if err := pc.Close(); err != nil {
			t.Fatalf("PacketConn.Close with the task queue full: %v", err)
		}
		close(block)
		select {
		case <-ev.closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the connection did not close")
		}
		select {
		case <-pc.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the datagram socket did not close")
		}
	})
}

// TestListenDuringShutdown: servers opened while their group shuts down
// either fail to open or stop with it, each listening fd closed once
// (CheckLeaks counts the fds; -race sees who touches the listener).
func TestListenDuringShutdown(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		refused := 0
		for range 20 {
			g := ctGroup(t, b, 1)
			var servers []*conn.Server
			refused += openDuringShutdown(t, g, 2000, func() error {
				s, err := conn.Listen(context.Background(), g, "tcp4", "127.0.0.1:0", ctNewServerHandler(t, nil))
				if err == nil {
					servers = append(servers, s)
				}
				return err
			})
			for _, s := range servers {
				if err := s.Close(); err != nil && !errors.Is(err, conn.ErrServerClosed) {
					t.Errorf("Close: %v", err)
				}
			}
		}
		if refused == 0 {
			t.Fatal("no Listen met the shutdown: the test proves nothing")
		}
	})
}

// TestPauseResumeWithFullTaskQueue: PauseRead then ResumeRead from another
// goroutine while the loop's bounded task queue is full are not lost: the
// connection ends up reading. A setter refused by the full queue says so
// (loop.ErrQueueFull), not that the connection is closed.
func TestPauseResumeWithFullTaskQueue(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		g := ctGroup(t, b, 1, loop.WithMaxPendingTasks(2))
		h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		srv := ctListen(t, "tcp4", "127.0.0.1:0", g, h)
		cl, sc, _ := ctDialAccepted(t, srv, h)
		l := g.Loop(0)
		block, running := make(chan struct{}), make(chan struct{})
		if err := l.Execute(func() { close(running); <-block }); err != nil {
			t.Fatal(err)
		}
		<-running // the loop is in it: nothing leaves the queue now
		for l.Execute(func() {}) == nil {
		}
		if err := sc.SetNoDelay(true); !errors.Is(err, loop.ErrQueueFull) || errors.Is(err, net.ErrClosed) {
			t.Errorf("SetNoDelay with the task queue full: %v, want loop.ErrQueueFull", err)
		}
		if err := sc.PauseRead(); err != nil {
			t.Fatal(err)
		}
		if err := sc.ResumeRead(); err != nil {
			t.Fatal(err)
		}
		close(block)
		cl.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := cl.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(cl, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("echo after pause and resume: %q, %v (paused: %v)", buf, err, sc.ReadPaused())
		}
	})
}
