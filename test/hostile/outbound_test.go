package hostile

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// Peers that never read what the server sends them. With default options a
// connection pauses reading while it is unwritable, and a Write made above
// the outbound limit fails and resets the connection, so such a peer costs
// at most the outbound limit plus one write, and an echo server's
// connection no more than the high-water mark plus one receive's answers.

// outPeak records, per server connection, the most bytes its outbound
// queue held, and how each connection closed.
type outPeak struct {
	mu     sync.Mutex
	peak   map[*conn.Conn]int
	closed []error
	open   atomic.Int32
}

func newOutPeak() *outPeak { return &outPeak{peak: make(map[*conn.Conn]int)} }

func (p *outPeak) note(c *conn.Conn) {
	n := c.Buffered()
	p.mu.Lock()
	p.peak[c] = max(p.peak[c], n)
	p.mu.Unlock()
}

func (p *outPeak) onOpen(*conn.Conn) { p.open.Add(1) }

func (p *outPeak) onClose(c *conn.Conn, err error) {
	p.mu.Lock()
	p.closed = append(p.closed, err)
	p.mu.Unlock()
	p.open.Add(-1)
}

// max returns the largest peak of any connection.
func (p *outPeak) max() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := 0
	for _, n := range p.peak {
		m = max(m, n)
	}
	return m
}

// echoOut echoes every byte it receives and records the outbound peaks.
type echoOut struct{ p *outPeak }

func (h echoOut) OnOpen(c *conn.Conn) { h.p.onOpen(c) }
func (h echoOut) OnData(c *conn.Conn, data []byte) {
	_, _ = c.Write(data)
	h.p.note(c)
}
func (h echoOut) OnClose(c *conn.Conn, err error) { h.p.onClose(c, err) }

// answerLines answers every newline with a 4 KiB reply, all the lines of
// one OnRead in a row: a pipelining peer's requests, answered in one call.
type answerLines struct{ p *outPeak }

var reply4K = bytes.Repeat([]byte("r"), 4<<10)

func (h answerLines) OnOpen(c *conn.Conn)           { h.p.onOpen(c) }
func (h answerLines) OnData(*conn.Conn, []byte)     {}
func (h answerLines) OnClose(c *conn.Conn, e error) { h.p.onClose(c, e) }
func (h answerLines) OnRead(c *conn.Conn, data []byte) int {
	for _, b := range data {
		if b != '\n' {
			continue
		}
		if _, err := c.Write(reply4K); err != nil {
			break
		}
		h.p.note(c)
	}
	return len(data)
}

// floodNoRead connects n peers to addr that send chunk after chunk for d
// (or until the server resets them, or the heap passes 2 GiB) and never
// read; their receive buffer
// is small, so the server's sends stall at once. It returns once every
// peer is closed.
func floodNoRead(t *testing.T, addr string, n int, d time.Duration, chunk []byte) {
	t.Helper()
	deadline := time.Now().Add(d)
	peers := make([]net.Conn, 0, n)
	// The kernel's buffers as over a network, not loopback: a peer's own
	// send queue is capped, and it announces an Ethernet-sized segment,
	// since the server's kernel sizes its send buffer by segments (with
	// loopback's 64 KiB ones, about 2 MiB a connection that does not read;
	// a few hundred such take the machine's TCP memory to its limit, and
	// every other connection on it stalls). What the server's process
	// holds is what the test measures.
	dialer := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			for _, o := range [][3]int{
				{syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096},
				{syscall.SOL_SOCKET, syscall.SO_SNDBUF, 64 << 10},
				{syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 1448},
			} {
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
	for range n {
		pc, err := dialer.Dial("tcp", addr)
		if err != nil {
			for _, p := range peers {
				p.Close()
			}
			t.Fatalf("dial: %v", err)
		}
		peers = append(peers, pc)
	}
	// A safety stop for a server that does not bound its queues: the
	// flood ends once the heap passes 2 GiB.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if heapLive() > 2<<30 {
				t.Logf("the heap passed 2 GiB: the flood stops")
				for _, pc := range peers {
					_ = pc.SetWriteDeadline(time.Now())
				}
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for _, pc := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = pc.SetWriteDeadline(deadline)
			for {
				if _, err := pc.Write(chunk); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, pc := range peers {
		pc.Close()
	}
}

// waitClosed waits until every server connection reported OnClose.
func waitClosed(t *testing.T, p *outPeak) {
	t.Helper()
	if !testutil.Eventually(20*time.Second, func() bool { return p.open.Load() == 0 }) {
		t.Fatalf("%d server connections still open", p.open.Load())
	}
}

func listenOut(t *testing.T, g *loop.Group, h conn.Handler, opts ...conn.Option) *conn.Server {
	t.Helper()
	srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", h, opts...)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// outboundPressure is how many bytes a loop's connections queue for
// sending before an unwritable connection pauses reading at its high-water
// mark by default (docs/security.md, "Outbound").
const outboundPressure = 16 << 20

// TestOutboundEchoNeverRead: peers flood an echo server and never read.
// With default options each connection pauses reading once it queues half
// its outbound limit, or at the high-water mark once its loop queues
// outboundPressure: it holds at most that plus one receive's echo in its
// queue, and one receive's bytes kept.
func TestOutboundEchoNeverRead(t *testing.T) {
	backends(t, func(t *testing.T, b loop.Backend) {
		n := scale(100, 10)
		const loops = 2
		g := newGroup(t, b, loops)
		p := newOutPeak()
		srv := listenOut(t, g, echoOut{p})
		const perConn = 300 << 10 // high-water mark, one receive's answers, one kept receive, buffers
		// Each connection pauses at half its limit, or at its high-water
		// mark once the loop queues outboundPressure in all.
		budget := uint64(min(n*(conn.DefaultOutboundLimit/2+perConn), loops*outboundPressure+n*perConn))
		w := watchMem(t)
		floodNoRead(t, srv.Addr().String(), n, time.Duration(scale(4, 2))*time.Second, make([]byte, 64<<10))
		w.check(t, "echo to peers that never read", budget+16<<20, budget+48<<20)
		waitClosed(t, p)
		t.Logf("largest outbound queue: %d KiB", p.max()>>10)
		if m := p.max(); m > conn.DefaultOutboundLimit/2+128<<10 {
			t.Errorf("a connection queued %d bytes: more than half the outbound limit and one receive's answers", m)
		}
	})
}

// TestOutboundPipelinedAnswers: peers pipeline newline requests whose
// answers are 4 KiB each and never read; one OnRead answers every line it
// is given, never looking at writability. Reading pauses within the
// receive: once the server has seen how much its handler answers, a
// connection is handed no more of a receive than its answers may take
// before it pauses at 2 MiB. Only a first receive, before that is known,
// can queue up to the outbound limit, which then ends that connection with
// ErrOutboundLimit; no connection queues more than the limit and one
// write.
func TestOutboundPipelinedAnswers(t *testing.T) {
	backends(t, func(t *testing.T, b loop.Backend) {
		n := scale(20, 5)
		const loops = 2
		g := newGroup(t, b, loops)
		p := newOutPeak()
		srv := listenOut(t, g, answerLines{p})
		const perConn = 2<<20 + 4<<10 + 128<<10
		const first = conn.DefaultOutboundLimit + 4<<10 + 128<<10
		w := watchMem(t)
		floodNoRead(t, srv.Addr().String(), n, time.Duration(scale(8, 4))*time.Second, bytes.Repeat([]byte("\n"), 16<<10))
		budget := uint64(loops*first + n*perConn)
		w.check(t, "4 KiB answers to pipelined requests never read", budget+16<<20, budget+48<<20)
		waitClosed(t, p)
		t.Logf("largest outbound queue: %d KiB", p.max()>>10)
		if m := p.max(); m > conn.DefaultOutboundLimit+len(reply4K) {
			t.Errorf("a connection queued %d bytes: more than the outbound limit %d and one write", m, conn.DefaultOutboundLimit)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		limited := 0
		for _, err := range p.closed {
			switch {
			case errors.Is(err, conn.ErrOutboundLimit):
				limited++
			case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), err == io.EOF:
				// The peer left with the connection paused.
			default:
				t.Errorf("OnClose: %v, want ErrOutboundLimit or the peer's reset", err)
			}
		}
		if limited > loops {
			t.Errorf("%d connections passed the outbound limit: only a first receive per loop, before the handler's answers were measured, may", limited)
		}
	})
}

// TestOutboundPauseAtScale: many peers flood an echo server and never
// read, with default options and with WithPauseReadWhenUnwritable(true). A
// paused connection keeps at most one receive's bytes beyond its queue on
// both backends: the peak heap per connection is bounded, and io_uring's
// multishot receive costs no more than twice epoll. By default the loops'
// connections first queue up to outboundPressure each, then pause at the
// high-water mark.
func TestOutboundPauseAtScale(t *testing.T) {
	n := scale(1000, 200)
	const perConn = 300 << 10
	for _, strict := range []bool{false, true} {
		name, allowance := "default", uint64(2*outboundPressure)
		var opts []conn.Option
		if strict {
			name, allowance = "pause at the high-water mark", 0
			opts = append(opts, conn.WithPauseReadWhenUnwritable(true))
		}
		t.Run(name, func(t *testing.T) {
			figures := map[loop.Backend]uint64{}
			ratio := uint64(2) // io_uring's peak heap against epoll's, at most
			backends(t, func(t *testing.T, b loop.Backend) {
				g := newGroup(t, b, 2)
				p := newOutPeak()
				srv := listenOut(t, g, echoOut{p}, opts...)
				w := watchMem(t)
				floodNoRead(t, srv.Addr().String(), n, time.Duration(scale(6, 3))*time.Second, make([]byte, 64<<10))
				heap, rss := w.end()
				t.Logf("%d peers that never read: peak heap +%s (%d KiB a connection), peak RSS +%s; largest queue %d KiB",
					n, mib(heap), heap/uint64(n)>>10, mib(rss), p.max()>>10)
				figures[b] = heap
				per := perConn
				if b == loop.BackendUring && g.Features().RecvCap == 0 {
					// Before 6.17 (or as if, RINGLOOP=kernel=): no bundles and
					// no total on a multishot receive, which takes what the
					// socket holds as the connection pauses (docs/security.md).
					// The comparison with epoll allows the same factor.
					per = 2 * perConn
					ratio = 4
				}
				maxHeap, maxRSS := raceScaled(uint64(n*per)+allowance, uint64(n*per)+allowance+64<<20)
				if heap > maxHeap {
					t.Errorf("peak heap %s: more than %s (%d KiB a connection and %s)", mib(heap), mib(maxHeap), per>>10, mib(allowance))
				}
				if rss > maxRSS {
					t.Errorf("peak RSS %s: more than %s (%d KiB a connection, %s and 64 MiB)", mib(rss), mib(maxRSS), per>>10, mib(allowance))
				}
				waitClosed(t, p)
			})
			u, uok := figures[loop.BackendUring]
			e, eok := figures[loop.BackendEpoll]
			if uok && eok && u > ratio*e+8<<20 {
				t.Errorf("io_uring's peak heap %s is more than %d times epoll's %s", mib(u), ratio, mib(e))
			}
		})
	}
}
