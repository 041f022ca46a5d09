package conn_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// ctRoundTrip dials addr with net.Dial and checks one echo.
func ctRoundTrip(t *testing.T, network, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial(network, addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(nc, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo: %q, %v", got, err)
	}
	return nc
}

// TestServerClose: Close stops accepting (new dials are refused, a Unix
// path is removed) while live conns keep working; a second Close reports
// ErrServerClosed.
func TestServerClose(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		for _, network := range []string{"tcp", "unix"} {
			addr := "127.0.0.1:0"
			if network == "unix" {
				addr = t.TempDir() + "/s.sock"
			}
			h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
			s := ctListen(t, network, addr, g, h)
			nc := ctRoundTrip(t, network, s.Addr().String())
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); !errors.Is(err, conn.ErrServerClosed) {
				t.Fatalf("second Close: %v", err)
			}
			if _, err := net.Dial(network, s.Addr().String()); err == nil {
				t.Fatalf("%s: dial after Close succeeded", network)
			}
			if network == "unix" {
				if _, err := os.Stat(addr); !os.IsNotExist(err) {
					t.Fatalf("unix path still there after Close: %v", err)
				}
			}
			// The live connection still echoes.
			nc.Write([]byte("pong"))
			got := make([]byte, 4)
			if _, err := io.ReadFull(nc, got); err != nil || string(got) != "pong" {
				t.Fatalf("live conn after Close: %q, %v", got, err)
			}
			if s.Conns() != 1 {
				t.Fatalf("Conns() = %d, want 1", s.Conns())
			}
			nc.Close()
			ctWaitFor(t, 5*time.Second, "Conns() = 0", func() bool { return s.Conns() == 0 })
		}
	})
}

// TestServerShutdown: Shutdown closes every live conn (OnClose(nil) for
// each), waits for them, and leaves Conns() at 0.
func TestServerShutdown(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		s := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		var clients []net.Conn
		for range 10 {
			clients = append(clients, ctRoundTrip(t, "tcp", s.Addr().String()))
		}
		ctWaitFor(t, 5*time.Second, "10 conns", func() bool { return s.Conns() == 10 })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if s.Conns() != 0 {
			t.Fatalf("Conns() = %d after Shutdown", s.Conns())
		}
		h.mu.Lock()
		evs := append([]*ctEvents(nil), h.conns...)
		h.mu.Unlock()
		if len(evs) != 10 {
			t.Fatalf("%d conns opened, want 10", len(evs))
		}
		for _, e := range evs {
			if err := e.wait(t); err != nil {
				t.Fatalf("OnClose(%v), want nil", err)
			}
		}
		for _, nc := range clients {
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := nc.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("client read %v, want EOF", err)
			}
			nc.Close()
		}
	})
}

// TestReusePort: one SO_REUSEPORT listener per worker loop; conns are
// served on several loops and each callback runs on its conn's loop.
func TestReusePort(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		s := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithReusePort(true))
		loops := map[*loop.Loop]bool{}
		for range 32 {
			nc := ctRoundTrip(t, "tcp", s.Addr().String())
			c, _ := h.accepted(t)
			loops[c.Loop()] = true
			nc.Close()
		}
		if len(loops) != 2 {
			t.Logf("connections landed on %d of 2 loops (the kernel hashes 4-tuples)", len(loops))
		}
		if _, err := conn.Listen(context.Background(), g, "unix", t.TempDir()+"/x", h, conn.WithReusePort(true)); !errors.Is(err, conn.ErrInvalidOption) {
			t.Fatalf("reuse-port on unix: %v", err)
		}
	})
}

// TestAcceptEMFILE: with RLIMIT_NOFILE just above the fds in use, an accept
// storm hits EMFILE; the acceptor backs off (its loop turns stay few
// instead of spinning) and serves every client once the limit is raised.
// The limit is lowered before Listen: io_uring reads RLIMIT_NOFILE when an
// accept is prepared, so a multishot accept armed earlier keeps the old
// limit. The server's count of out-of-resource accept failures proves that
// EMFILE was hit.
func TestAcceptEMFILE(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		// Create the client sockets first: connecting needs no new fd.
		const clients = 16
		var fds []int
		for range clients {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			fds = append(fds, fd)
		}
		defer func() {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}()
		var old unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
		lim := old
		lim.Cur = uint64(limitForFree(4)) // the listener, then room for a few accepts
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Skipf("setrlimit: %v", err)
		}
		restored := false
		restore := func() {
			if !restored {
				restored = true
				unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
			}
		}
		defer restore()
		s, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", h)
		if err != nil {
			restore()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s.Shutdown(ctx)
		})
		sa := &unix.SockaddrInet4{Port: s.Addr().(*net.TCPAddr).Port, Addr: [4]byte{127, 0, 0, 1}}
		for _, fd := range fds {
			if err := unix.Connect(fd, sa); err != nil {
				restore()
				t.Fatalf("connect: %v", err)
			}
		}
		before := g.Stats().Total.Turns
		time.Sleep(300 * time.Millisecond)
		turns := g.Stats().Total.Turns - before
		emfile := s.Stats().OutOfResources
		held := s.Conns()
		restore()
		t.Logf("under the limit: %d conns, %d accepts failed with EMFILE, %d loop turns in 300ms", held, emfile, turns)
		if emfile == 0 {
			t.Fatalf("no accept failed with EMFILE (%d of %d clients accepted): the limit did not apply", held, clients)
		}
		// 300 ms of backoff (10, 20, 40, 80, 160 ms) is a handful of
		// timer turns; a spinning acceptor would turn thousands of times.
		if turns > 200 {
			t.Fatalf("%d loop turns in 300ms under EMFILE: accept is spinning", turns)
		}
		ctWaitFor(t, 10*time.Second, "every client accepted", func() bool { return s.Conns() == clients })
		for _, fd := range fds {
			if _, err := unix.Write(fd, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 2)
			unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 10})
			n, err := unix.Read(fd, buf)
			for err == unix.EINTR {
				// A blocking read with SO_RCVTIMEO is not restarted
				// after a signal (the runtime's preemption sends some).
				n, err = unix.Read(fd, buf)
			}
			if n != 2 || err != nil {
				t.Fatalf("echo after recovery: %d, %v", n, err)
			}
		}
	})
}

// limitForFree returns the lowest RLIMIT_NOFILE under which exactly n fd
// numbers are free (the kernel hands out the lowest free number, so holes
// below the highest open fd count too).
func limitForFree(n int) int {
	ents, _ := os.ReadDir("/proc/self/fd")
	open := map[int]bool{}
	for _, e := range ents {
		var k int
		for _, ch := range e.Name() {
			k = k*10 + int(ch-'0')
		}
		open[k] = true
	}
	free, l := 0, 0
	for ; free < n; l++ {
		if !open[l] {
			free++
		}
	}
	return l
}
