package hostile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// A line server under attack, written four ways with the same logic: each
// line is answered with reply4K, and a line may be up to
// conn.DefaultInboundLimit long. The reference is package net, a goroutine
// per connection with bufio; the same code also runs on conn.ListenNet
// (the adapter, on a shared-thread group). On the callback API the server
// is a ReadHandler that stops consuming while the connection is unwritable
// (docs/conn.md, "The write path and water marks"), or a naive OnData
// handler that answers every newline it is given without looking.

// lineStats counts what a line server of any kind did.
type lineStats struct {
	opened, closed atomic.Int64
	received       atomic.Int64 // bytes received, counted as the handler first sees them
	seen           atomic.Int64 // connections whose first bytes the handler saw
	answered       atomic.Int64 // lines answered
	peakQueued     atomic.Int64 // the largest outbound queue seen after an answer (callback API)

	mu     sync.Mutex
	causes map[string]int // how connections closed
}

func newLineStats() *lineStats { return &lineStats{causes: map[string]int{}} }

func (s *lineStats) onClose(err error) {
	kind := "nil"
	switch {
	case err == nil:
	case errors.Is(err, conn.ErrInboundLimit):
		kind = "ErrInboundLimit"
	case errors.Is(err, conn.ErrOutboundLimit):
		kind = "ErrOutboundLimit"
	case errors.Is(err, syscall.ECONNRESET):
		kind = "ECONNRESET"
	case errors.Is(err, syscall.EPIPE):
		kind = "EPIPE"
	case errors.Is(err, io.EOF):
		kind = "EOF"
	case errors.Is(err, net.ErrClosed):
		kind = "closed"
	default:
		kind = "other"
	}
	s.mu.Lock()
	s.causes[kind]++
	s.mu.Unlock()
	s.closed.Add(1)
}

func (s *lineStats) notePeak(c *conn.Conn) {
	n := int64(c.Buffered())
	for {
		p := s.peakQueued.Load()
		if n <= p || s.peakQueued.CompareAndSwap(p, n) {
			return
		}
	}
}

// closeCauses returns how the server's connections closed so far.
func (s *lineStats) closeCauses() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.causes)
}

// lineAnswerer is the idiomatic line server on the callback API: one
// handler per connection that scans each byte once, answers each complete
// line, and stops consuming (returns what it consumed so far) while the
// connection is unwritable.
type lineAnswerer struct {
	s       *lineStats
	scanned int // bytes after the consumed ones already searched
	left    int // bytes the last call left: the next data starts with them
	seen    bool
}

func (h *lineAnswerer) OnOpen(*conn.Conn)               { h.s.opened.Add(1) }
func (h *lineAnswerer) OnData(*conn.Conn, []byte)       {}
func (h *lineAnswerer) OnClose(_ *conn.Conn, err error) { h.s.onClose(err) }
func (h *lineAnswerer) OnRead(c *conn.Conn, data []byte) (consumed int) {
	if !h.seen {
		h.seen = true
		h.s.seen.Add(1)
	}
	h.s.received.Add(int64(len(data) - min(h.left, len(data))))
	defer func() { h.left = len(data) - consumed }()
	for c.Writable() {
		i := bytes.IndexByte(data[consumed+h.scanned:], '\n')
		if i < 0 {
			h.scanned = len(data) - consumed
			return consumed
		}
		c.Write(reply4K)
		h.s.answered.Add(1)
		h.s.notePeak(c)
		consumed += h.scanned + i + 1
		h.scanned = 0
	}
	return consumed
}

// naiveLines answers every newline of every OnData with reply4K, without
// looking at the connection's writability, and ignores the rest: the
// library must bound what it queues all the same.
type naiveLines struct {
	s    *lineStats
	seen bool
}

func (h *naiveLines) OnOpen(*conn.Conn)               { h.s.opened.Add(1) }
func (h *naiveLines) OnClose(_ *conn.Conn, err error) { h.s.onClose(err) }
func (h *naiveLines) OnData(c *conn.Conn, data []byte) {
	if !h.seen {
		h.seen = true
		h.s.seen.Add(1)
	}
	h.s.received.Add(int64(len(data)))
	for _, b := range data {
		if b == '\n' {
			c.Write(reply4K)
			h.s.answered.Add(1)
			h.s.notePeak(c)
		}
	}
}

// countingReader counts the bytes read through it, and its first read
// that brought bytes.
type countingReader struct {
	r    io.Reader
	s    *lineStats
	seen bool
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.s.received.Add(int64(n))
	if n > 0 && !c.seen {
		c.seen = true
		c.s.seen.Add(1)
	}
	return n, err
}

// serveLines serves the line protocol on ln, a goroutine per connection
// with bufio, as a package net server does. stop closes ln and every
// connection and waits for their goroutines.
func serveLines(ln net.Listener, s *lineStats) (stop func()) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		closed bool
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond) // EMFILE and the like
				continue
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			conns[c] = struct{}{}
			mu.Unlock()
			s.opened.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := lineConn(c, s)
				c.Close()
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				s.onClose(err)
			}()
		}
	}()
	return func() {
		ln.Close()
		mu.Lock()
		closed = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// lineConn is the goroutine of one connection of serveLines.
func lineConn(c net.Conn, s *lineStats) error {
	r := bufio.NewReader(&countingReader{r: c, s: s})
	w := bufio.NewWriter(c)
	var line []byte // a line longer than r's buffer, so far
	for {
		frag, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(line)+len(frag) > conn.DefaultInboundLimit {
				return conn.ErrInboundLimit
			}
			line = append(line, frag...)
			continue
		}
		if err != nil {
			return err
		}
		line = line[:0]
		if _, err := w.Write(reply4K); err != nil {
			return err
		}
		s.answered.Add(1)
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// A lineServer is one of the line servers above, listening.
type lineServer struct {
	addr  string
	stats *lineStats
	stop  func()
}

// waitClosed stops the server, then waits until every one of its
// connections closed.
func (ls *lineServer) close(t *testing.T) {
	t.Helper()
	ls.stop()
	if !testutil.Eventually(30*time.Second, func() bool { return ls.stats.closed.Load() == ls.stats.opened.Load() }) {
		t.Errorf("%d of the server's %d connections still open 30 s after the peers closed", ls.stats.opened.Load()-ls.stats.closed.Load(), ls.stats.opened.Load())
	}
}

// A lineKind says how a line server is made.
type lineKind int

const (
	kindNet         lineKind = iota // package net
	kindReadHandler                 // lineAnswerer on conn.ListenFunc
	kindOnData                      // naiveLines on conn.ListenFunc
	kindAdapter                     // serveLines on conn.ListenNet, a shared-thread group
)

func (k lineKind) String() string {
	return [...]string{"server=net", "server=ReadHandler", "server=OnData", "server=adapter-shared-thread"}[k]
}

// startLines starts a line server of kind k (on backend b for the
// ringloop kinds), with default options and two loops.
func startLines(t *testing.T, k lineKind, b loop.Backend) *lineServer {
	t.Helper()
	s := newLineStats()
	switch k {
	case kindNet:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return &lineServer{ln.Addr().String(), s, serveLines(ln, s)}
	case kindAdapter:
		g := newGroupWith(t, b, 2, loop.WithSharedThread(true))
		ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return &lineServer{ln.Addr().String(), s, serveLines(ln, s)}
	}
	g := newGroup(t, b, 2)
	var (
		srv *conn.Server
		err error
	)
	if k == kindReadHandler {
		srv, err = conn.ListenFunc(context.Background(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler { return &lineAnswerer{s: s} })
	} else {
		srv, err = conn.ListenFunc(context.Background(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler { return &naiveLines{s: s} })
	}
	if err != nil {
		t.Fatal(err)
	}
	return &lineServer{srv.Addr().String(), s, func() { srv.Close() }}
}

// newGroupWith is newGroup with more options.
func newGroupWith(tb testing.TB, b loop.Backend, loops int, opts ...loop.Option) *loop.Group {
	tb.Helper()
	opts = append([]loop.Option{loop.WithBackend(b), loop.WithLoops(loops), loop.WithLogger(logger)}, opts...)
	g, err := loop.NewGroup(opts...)
	if err != nil {
		tb.Fatalf("NewGroup: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			tb.Errorf("group Shutdown: %v", err)
		}
	})
	return g
}

// ethernetDialer dials as a peer over a network would: it announces
// Ethernet-sized segments (TCP_MAXSEG 1448), since the server's kernel
// sizes its send buffer by segments (with loopback's 64 KiB ones, a
// thousand peers that do not read take the machine's TCP memory), and a
// peer that never reads has a small receive buffer.
func ethernetDialer(rcvbuf int) *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			opts := [][3]int{{syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1448}}
			if rcvbuf > 0 {
				opts = append(opts, [3]int{syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf}, [3]int{syscall.SOL_SOCKET, syscall.SO_SNDBUF, 64 << 10})
			}
			for _, o := range opts {
				if serr == nil {
					serr = syscall.SetsockoptInt(int(fd), o[0], o[1], o[2])
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

// sinkServer accepts connections with plain system calls and never reads
// them: what the peers of an attack cost the process on their own, to be
// subtracted from what a server under the same attack costs.
func sinkServer(t *testing.T) (addr string, accepted *atomic.Int64, stop func()) {
	t.Helper()
	lfd, sa := testutil.ListenFd(t)
	accepted = new(atomic.Int64)
	var fds []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
			if err != nil {
				if err == unix.EINTR || err == unix.ECONNABORTED {
					continue
				}
				return // shut down
			}
			fds = append(fds, fd)
			accepted.Add(1)
		}
	}()
	addr = net.JoinHostPort("127.0.0.1", itoa(sa.Port))
	return addr, accepted, func() {
		unix.Shutdown(lfd, unix.SHUT_RDWR) // wakes the blocked accept
		<-done
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

func itoa(n int) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// peerState reports, without blocking, whether a client connection is
// still open: "" if so, else how it ended ("reset", "EOF" or the error).
func peerState(c net.Conn) string {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err.Error()
	}
	state := ""
	buf := make([]byte, 1)
	rc.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case err == unix.EAGAIN:
		case errors.Is(err, unix.ECONNRESET):
			state = "reset"
		case err != nil:
			state = err.Error()
		case n == 0:
			state = "EOF"
		}
		return true
	})
	return state
}

// A canary is one legitimate client doing request/response, a line and
// its 4 KiB answer, while an attack runs; it records each round trip.
type canary struct {
	until     atomic.Int64 // stop once this many round trips are done (0: not yet set)
	count     atomic.Int64
	first     chan struct{} // closed after the first answer
	done      chan struct{}
	lat       []time.Duration // read after done
	idleTrips int             // round trips before the attack
	err       error           // read after done
}

// startCanary connects to addr and starts the round trips.
func startCanary(t *testing.T, addr string) *canary {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		t.Fatalf("canary: %v", err)
	}
	k := &canary{first: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(k.done)
		defer c.Close()
		buf := make([]byte, len(reply4K))
		req := []byte("canary\n")
		for i := 0; i < 10_000_000; i++ {
			if u := k.until.Load(); u > 0 && k.count.Load() >= u {
				return
			}
			// A generous bound on one round trip: a stall fails the canary.
			c.SetDeadline(time.Now().Add(60 * time.Second))
			start := time.Now()
			if _, err := c.Write(req); err != nil {
				k.err = err
				return
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				k.err = err
				return
			}
			k.lat = append(k.lat, time.Since(start))
			if k.count.Add(1) == 1 {
				close(k.first)
			}
		}
	}()
	select {
	case <-k.first:
	case <-k.done:
		t.Fatalf("canary: no first answer: %v", k.err)
	}
	return k
}

// idle waits until the canary made n round trips before the attack.
func (k *canary) idle(t *testing.T, n int) {
	t.Helper()
	if !testutil.Eventually(60*time.Second, func() bool { return k.count.Load() >= int64(n) }) {
		t.Fatalf("the canary made %d round trips of %d in 60 s before the attack", k.count.Load(), n)
	}
	k.idleTrips = int(k.count.Load())
}

// finish lets the canary make more round trips, then waits for it, and
// returns the p99 of its round trips since idle (under the attack) and
// before it, and the round trips made under the attack.
func (k *canary) finish(more int) (p99, idleP99 time.Duration, n int, err error) {
	k.until.Store(k.count.Load() + int64(more))
	<-k.done
	return percentile99(k.lat[k.idleTrips:]), percentile99(k.lat[:k.idleTrips]), len(k.lat) - k.idleTrips, k.err
}

func percentile99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	lat = slices.Clone(lat)
	slices.Sort(lat)
	return lat[(len(lat)*99+99)/100-1]
}
