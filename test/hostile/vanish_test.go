package hostile

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// Peers that vanish without a FIN or a reset: a host that crashed or
// rebooted, a NAT mapping that was lost. Nothing ever arrives on their
// connections, so only keepalive, on by default with package net's 15 s,
// finds them gone: the peer's host answers the first probe with a reset.
// Each peer here makes one request, then its socket is closed in repair
// mode (TCP_REPAIR), which sends nothing.

// atkVanishBound is how long after the peers vanish every server
// connection, and its fd, must be released: the first probe goes out 15 s
// after the last traffic.
const atkVanishBound = 60 * time.Second

// atkEchoCount echoes what it receives and counts its connections.
type atkEchoCount struct {
	conn.NopHandler
	open   atomic.Int64
	resets atomic.Int64
	others atomic.Int64
	other  atomic.Value // error
}

func (h *atkEchoCount) OnOpen(*conn.Conn)                { h.open.Add(1) }
func (h *atkEchoCount) OnData(c *conn.Conn, data []byte) { c.Write(data) }
func (h *atkEchoCount) OnClose(_ *conn.Conn, err error) {
	h.open.Add(-1)
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ETIMEDOUT) {
		h.resets.Add(1)
	} else {
		h.others.Add(1)
		h.other.CompareAndSwap(nil, errOrNil{err})
	}
}

type errOrNil struct{ error }

// atkServeEchoNet is the echo server on package net: a goroutine per
// connection copies what it reads back. It returns the address, the count
// of open connections and a function that stops it.
func atkServeEchoNet(t *testing.T) (net.Addr, *atomic.Int64, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			open.Add(1)
			go func() {
				defer open.Add(-1)
				defer c.Close()
				buf := make([]byte, 4<<10)
				for {
					k, err := c.Read(buf)
					if err != nil {
						return
					}
					if _, err := c.Write(buf[:k]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr(), &open, func() { ln.Close(); <-done }
}

// atkHTTPCounted serves net/http on ln with a handler answering "ok",
// counting open connections through ConnState. It returns the count and a
// function that stops the server.
func atkHTTPCounted(ln net.Listener) (*atomic.Int64, func()) {
	var open atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				open.Add(1)
			case http.StateClosed, http.StateHijacked:
				open.Add(-1)
			}
		},
		ErrorLog: nil,
	}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	return &open, func() { srv.Close(); <-done }
}

var atkHTTPGet = []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")

// atkHTTPExchange sends one GET on nc and reads its answer "ok" whole.
func atkHTTPExchange(nc net.Conn) error {
	nc.SetDeadline(time.Now().Add(atkCanaryDeadline))
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(atkHTTPGet); err != nil {
		return err
	}
	var got []byte
	buf := make([]byte, 512)
	for !bytes.HasSuffix(got, []byte("\r\n\r\nok")) {
		k, err := nc.Read(buf)
		got = append(got, buf[:k]...)
		if err != nil {
			return err
		}
	}
	return nil
}

// atkEchoExchange sends 16 bytes on nc and reads them back.
func atkEchoExchange(nc net.Conn) error {
	nc.SetDeadline(time.Now().Add(atkCanaryDeadline))
	defer nc.SetDeadline(time.Time{})
	return atkLineRoundTrip(nc, []byte("0123456789abcde\n"), 16)()
}

// atkVanish closes nc in repair mode: the socket goes without a FIN or a
// reset. It reports unix.EPERM where repair mode is refused.
func atkVanish(nc net.Conn) error {
	rc, err := nc.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_REPAIR, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	return nc.Close()
}

// TestVanishedPeersReleased: peers each make one request, to a
// callback-API echo server and to net/http on conn.ListenNet (shared
// thread), then vanish without a FIN or a reset. With default options,
// every server connection and its fd is released within atkVanishBound of
// their vanishing, on both backends, as on package net with the same
// handler; a canary client doing request/response meanwhile is never
// reset, and its p99 is at most twice package net's; the peak RSS is at
// most 1.5 times package net's (and 16 MiB).
func TestVanishedPeersReleased(t *testing.T) {
	atkCanaryChild()
	n := scale(2000, 200)
	atkNeedFds(t, 2*n+64)
	// Repair mode needs CAP_NET_ADMIN: find out once, before any server.
	if probe, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		nc, err := net.Dial("tcp", probe.Addr().String())
		if err == nil {
			if err := atkVanish(nc); errors.Is(err, unix.EPERM) {
				nc.Close()
				probe.Close()
				t.Skipf("TCP_REPAIR needs CAP_NET_ADMIN, which this process lacks: %v", err)
			}
		}
		probe.Close()
	}
	t.Run("echo", func(t *testing.T) {
		figs := new(atkFigures)
		atkRun(t, atkTargets(true, false), func(t *testing.T, tg atkTarget, g *loop.Group) {
			var addr net.Addr
			var open func() int
			var h *atkEchoCount
			if tg.net {
				a, o, stop := atkServeEchoNet(t)
				defer stop()
				addr, open = a, func() int { return int(o.Load()) }
			} else {
				h = new(atkEchoCount)
				srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", h)
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				addr = srv.Addr()
				open = func() int {
					if a := srv.Stats().Active; a != srv.Conns() || int64(a) != h.open.Load() {
						return max(a, srv.Conns(), int(h.open.Load()))
					}
					return srv.Conns()
				}
			}
			atkVanishRun(t, tg, figs, addr, n, open, "echo", atkEchoExchange, func() {
				if h == nil {
					return
				}
				t.Logf("closed with ECONNRESET or ETIMEDOUT %d, otherwise %d", h.resets.Load(), h.others.Load())
				if e, ok := h.other.Load().(errOrNil); ok {
					t.Errorf("%d connections of vanished peers closed with neither ECONNRESET nor ETIMEDOUT, the first with %v", h.others.Load(), e.error)
				}
			})
		})
	})
	t.Run("http", func(t *testing.T) {
		figs := new(atkFigures)
		atkRun(t, atkTargets(false, true), func(t *testing.T, tg atkTarget, g *loop.Group) {
			var ln net.Listener
			var srv *conn.Server
			if tg.net {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				ln = l
			} else {
				l, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				ln, srv = l, l.Server()
			}
			served, stop := atkHTTPCounted(ln)
			defer stop()
			open := func() int {
				o := int(served.Load())
				if srv != nil {
					o = max(o, srv.Conns(), srv.Stats().Active)
				}
				return o
			}
			atkVanishRun(t, tg, figs, ln.Addr(), n, open, "http", atkHTTPExchange, nil)
		})
	})
}

// atkVanishRun plays the attack against the server at addr, whose open
// connections open counts, and checks what TestVanishedPeersReleased
// promises; check, if not nil, runs once the peers' connections are
// released, before the canary's closes.
func atkVanishRun(t *testing.T, tg atkTarget, figs *atkFigures, addr net.Addr, n int, open func() int, kind string, exchange func(net.Conn) error, check func()) {
	t.Helper()
	port := atkPort(addr)
	canary := atkStartCanary(t, "TestVanishedPeersReleased", kind, addr)
	// The baseline: the server and the canary's connection.
	baseFds := testutil.FdCount()
	basePort := atkPortFds(port)
	w := watchMem(t)
	start := time.Now()
	peers := atkDialAll(t, &net.Dialer{}, addr.String(), n, func(_ int, nc net.Conn) error { return exchange(nc) })
	testutil.WaitFor(t, 30*time.Second, "the server to count every peer's connection", func() bool { return open() == n+1 })
	dialed := time.Since(start)
	for i, nc := range peers {
		if err := atkVanish(nc); err != nil {
			for _, nc := range peers[i:] {
				nc.Close()
			}
			t.Fatalf("closing a peer in repair mode: %v", err)
		}
	}
	vanished := time.Now()
	released := testutil.Eventually(atkVanishBound, func() bool {
		return open() == 1 && atkPortFds(port) <= basePort && testutil.FdCount() <= baseFds
	})
	took := time.Since(vanished)
	if check != nil {
		check()
	}
	heap, rss := w.end()
	res := canary.end()
	t.Logf("%s: %d peers connected and served in %v, vanished; %v later %d connections open (the canary's included), %d fds of the server's port and %d fds above the baseline",
		tg, n, dialed.Round(time.Millisecond), took.Round(time.Millisecond), open(), atkPortFds(port)-basePort, testutil.FdCount()-baseFds)
	if !released {
		t.Errorf("not every connection of a vanished peer was released within %v", atkVanishBound)
	}
	atkCheckCanary(t, tg, figs, "p99", res)
	atkCheckMem(t, tg, figs, "rss", heap, rss, 16<<20, true)
}
