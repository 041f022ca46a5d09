package conn_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// ctKeepAlive is a socket's keepalive as getsockopt reads it: SO_KEEPALIVE,
// TCP_KEEPIDLE and TCP_KEEPINTVL (seconds), TCP_KEEPCNT.
type ctKeepAlive struct{ on, idle, interval, count int }

// ctKeepAliveOf reads the keepalive of the socket fd (a Unix socket has
// only SO_KEEPALIVE).
func ctKeepAliveOf(tb testing.TB, fd int, tcp bool) ctKeepAlive {
	tb.Helper()
	get := func(level, opt int) int {
		v, err := unix.GetsockoptInt(fd, level, opt)
		if err != nil {
			tb.Fatalf("getsockopt(%d, %d): %v", level, opt, err)
		}
		return v
	}
	k := ctKeepAlive{on: get(unix.SOL_SOCKET, unix.SO_KEEPALIVE)}
	if tcp {
		k.idle = get(unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		k.interval = get(unix.IPPROTO_TCP, unix.TCP_KEEPINTVL)
		k.count = get(unix.IPPROTO_TCP, unix.TCP_KEEPCNT)
	}
	return k
}

// ctNetKeepAlive reads the keepalive of a NetConn's socket through its
// SyscallConn, as code written for package net would.
func ctNetKeepAlive(tb testing.TB, c net.Conn) ctKeepAlive {
	tb.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		tb.Fatal(err)
	}
	var k ctKeepAlive
	if err := rc.Control(func(fd uintptr) { k = ctKeepAliveOf(tb, int(fd), true) }); err != nil {
		tb.Fatal(err)
	}
	return k
}

// TestKeepAliveDefaults checks the keepalive that accepted and dialed TCP
// connections get, read back with getsockopt: package net's by default (on,
// 15 s idle, 15 s interval, 9 probes), what WithKeepAlive and
// WithKeepAliveConfig give, and none with WithKeepAlive(-1) or on a Unix
// socket.
// An accepted socket gets it from its listener, where Linux copies it
// from: this also checks that the kernel does.
func TestKeepAliveDefaults(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		ctx := context.Background()
		def := ctKeepAlive{1, 15, 15, 9}
		kernel := ctKeepAlive{1, ctSysctl(t, "tcp_keepalive_time"), ctSysctl(t, "tcp_keepalive_intvl"), ctSysctl(t, "tcp_keepalive_probes")}
		for _, tc := range []struct {
			name string
			opts []conn.Option
			want ctKeepAlive
		}{
			{"default", nil, def},
			{"zero", []conn.Option{conn.WithKeepAlive(0)}, def},
			{"1500ms", []conn.Option{conn.WithKeepAlive(1500 * time.Millisecond)}, ctKeepAlive{1, 2, 2, 9}},
			{"reuse-port", []conn.Option{conn.WithReusePort(true), conn.WithKeepAlive(time.Minute)}, ctKeepAlive{1, 60, 60, 9}},
			{"off", []conn.Option{conn.WithKeepAlive(-1)}, ctKeepAlive{on: 0}},
			{"config", []conn.Option{conn.WithKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: 5 * time.Second, Count: 3})}, ctKeepAlive{1, 30, 5, 3}},
			{"config-zero", []conn.Option{conn.WithKeepAliveConfig(net.KeepAliveConfig{Enable: true})}, def},
			{"config-kernel", []conn.Option{conn.WithKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1})}, kernel},
			{"config-off", []conn.Option{conn.WithKeepAliveConfig(net.KeepAliveConfig{Idle: time.Second})}, ctKeepAlive{on: 0}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h := ctNewServerHandler(t, nil)
				srv := ctListen(t, "tcp", "127.0.0.1:0", g, h, tc.opts...)
				dialed, err := conn.Dial(ctx, g, "tcp", srv.Addr().String(), conn.NopHandler{}, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer dialed.Close()
				accepted, _ := h.accepted(t)
				async, err := conn.DialAsync(ctx, g, "tcp", srv.Addr().String(), conn.NopHandler{}, tc.opts...).Wait(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer async.Close()
				h.accepted(t)
				for what, c := range map[string]*conn.Conn{"accepted": accepted, "dialed": dialed, "dialed async": async} {
					got := ctKeepAliveOf(t, conn.Fd(c), true)
					if tc.want.on == 0 {
						got = ctKeepAlive{on: got.on}
					}
					if got != tc.want {
						t.Errorf("%s connection: keepalive %+v, want %+v", what, got, tc.want)
					}
				}
			})
		}
		t.Run("unix", func(t *testing.T) {
			h := ctNewServerHandler(t, nil)
			srv := ctListen(t, "unix", filepath.Join(t.TempDir(), "s"), g, h)
			dialed, err := conn.Dial(ctx, g, "unix", srv.Addr().String(), conn.NopHandler{})
			if err != nil {
				t.Fatal(err)
			}
			defer dialed.Close()
			accepted, _ := h.accepted(t)
			for what, c := range map[string]*conn.Conn{"accepted": accepted, "dialed": dialed} {
				if got := ctKeepAliveOf(t, conn.Fd(c), false); got.on != 0 {
					t.Errorf("%s Unix connection: SO_KEEPALIVE %d, want 0 (untouched)", what, got.on)
				}
			}
		})
		t.Run("adapters", func(t *testing.T) {
			ln, err := conn.ListenNet(ctx, g, "tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			dialed, err := conn.DialNet(ctx, g, "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer dialed.Close()
			accepted, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer accepted.Close()
			for what, c := range map[string]net.Conn{"ListenNet's accepted": accepted, "DialNet's": dialed} {
				if got := ctNetKeepAlive(t, c); got != def {
					t.Errorf("%s NetConn: keepalive %+v, want %+v", what, got, def)
				}
			}
		})
	})
}

// ctSysctl reads the integer sysctl net.ipv4.name.
func ctSysctl(tb testing.TB, name string) int {
	tb.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	return n
}

// TestKeepAliveLimits checks that keepalive settings past the kernel's
// limits are refused, and that the limits themselves are taken.
func TestKeepAliveLimits(t *testing.T) {
	g := ctGroup(t, loop.BackendEpoll, 1)
	for _, tc := range []struct {
		k  net.KeepAliveConfig
		ok bool
	}{
		{net.KeepAliveConfig{Enable: true, Idle: conn.MaxKeepAlive, Interval: conn.MaxKeepAlive, Count: 127}, true},
		{net.KeepAliveConfig{Enable: true, Idle: conn.MaxKeepAlive + time.Second}, false},
		{net.KeepAliveConfig{Enable: true, Interval: 10 * time.Hour}, false},
		{net.KeepAliveConfig{Enable: true, Count: 128}, false},
	} {
		srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", conn.NopHandler{}, conn.WithKeepAliveConfig(tc.k))
		if err == nil {
			srv.Close()
		}
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, conn.ErrInvalidOption) {
			t.Errorf("Listen with %+v: %v", tc.k, err)
		}
	}
}

// ctVanishingClient connects a blocking raw TCP socket to addr and sends
// hello on it. vanish makes the socket disappear without a FIN or a
// reset: closed in repair mode (TCP_REPAIR, which needs CAP_NET_ADMIN), a
// socket sends nothing. Its host's kernel then answers the peer's next
// segment with a reset, as the host of a process that died unseen does.
// The test is skipped where repair mode is refused. The socket is closed
// when the test ends unless vanish closed it.
func ctVanishingClient(t *testing.T, addr net.Addr) (vanish func()) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	open := true
	t.Cleanup(func() {
		if open {
			unix.Close(fd)
		}
	})
	if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: addr.(*net.TCPAddr).Port}); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fd, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, 1); err != nil {
			if errors.Is(err, unix.EPERM) {
				t.Skipf("TCP_REPAIR needs CAP_NET_ADMIN, which this process lacks: %v", err)
			}
			t.Fatalf("TCP_REPAIR: %v", err)
		}
		open = false
		if err := unix.Close(fd); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
}

// ctVanishBound bounds the wait for a vanished peer's connection to close:
// with a 1 s keepalive the first probe goes out after 1 s of silence and
// the peer's host resets at once; were the probes unanswered, the kernel
// would drop the connection after 1 + 9 × 1 s.
const ctVanishBound = 30 * time.Second

// ctVanishedErr reports whether err is how keepalive ends a connection:
// the reset the peer's host answers a probe with, or the kernel's own
// timeout when no probe is answered.
func ctVanishedErr(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ETIMEDOUT)
}

// TestVanishedPeer checks that a connection whose peer vanished without a
// FIN or a reset is released: keepalive probes it, the peer's host resets,
// and OnClose runs with ECONNRESET.
func TestVanishedPeer(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := ctNewServerHandler(t, nil)
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithKeepAlive(time.Second))
		vanish := ctVanishingClient(t, srv.Addr())
		_, ev := h.accepted(t)
		ctWaitFor(t, 10*time.Second, "the client's bytes", func() bool { return string(ev.received()) == "hello" })
		vanish()
		select {
		case <-ev.closed:
		case <-time.After(ctVanishBound):
			t.Fatalf("the connection of a vanished peer is still open after %v", ctVanishBound)
		}
		if err := ev.wait(t); !ctVanishedErr(err) {
			t.Fatalf("OnClose: %v, want ECONNRESET or ETIMEDOUT", err)
		}
	})
}

// TestNetConnVanishedPeer checks the same for the adapter: a Read blocked
// on a ListenNet connection whose peer vanished returns the reset.
func TestNetConnVanishedPeer(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0", conn.WithKeepAlive(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		vanish := ctVanishingClient(t, ln.Addr())
		nc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		buf := make([]byte, 16)
		if n, err := nc.Read(buf); err != nil || string(buf[:n]) != "hello" {
			t.Fatalf("Read: %q, %v", buf[:n], err)
		}
		vanish()
		nc.SetReadDeadline(time.Now().Add(ctVanishBound))
		_, err = nc.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the connection of a vanished peer is still open after %v", ctVanishBound)
		}
		if !ctVanishedErr(err) {
			t.Fatalf("Read: %v, want ECONNRESET or ETIMEDOUT", err)
		}
	})
}
