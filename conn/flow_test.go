package conn_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// ctPatternPeriod is the period of the stream pattern: a prime, so that
// no power-of-two shift of the stream matches it.
const ctPatternPeriod = 65521

// ctPatternTable holds two periods of the pattern, so any window of up to
// one period is a single slice of it.
var ctPatternTable = func() []byte {
	t := make([]byte, 2*ctPatternPeriod)
	for i := range t {
		p := i % ctPatternPeriod
		t[i] = byte(p ^ p>>8 ^ 0x5a)
	}
	return t
}()

// ctPattern fills b with the stream pattern at offset off (a byte that
// depends on its position, so reordering, loss and duplication show).
func ctPattern(b []byte, off int64) {
	for len(b) > 0 {
		i := int(off % ctPatternPeriod)
		n := copy(b, ctPatternTable[i:i+ctPatternPeriod])
		b, off = b[n:], off+int64(n)
	}
}

// ctCheckPattern reports the first offset where b differs from the
// pattern, or -1.
func ctCheckPattern(b []byte, off int64) int64 {
	for len(b) > 0 {
		i := int(off % ctPatternPeriod)
		n := min(len(b), ctPatternPeriod)
		if want := ctPatternTable[i : i+n]; !bytes.Equal(b[:n], want) {
			for j := range n {
				if b[j] != want[j] {
					return off + int64(j)
				}
			}
		}
		b, off = b[n:], off+int64(n)
	}
	return -1
}

// ctStalled waits until *n has not moved for quiet (bounded by limit).
func ctStalled(tb testing.TB, n *atomic.Int64, quiet, limit time.Duration) int64 {
	tb.Helper()
	deadline := time.Now().Add(limit)
	last, since := n.Load(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if v := n.Load(); v != last {
			last, since = v, time.Now()
		} else if time.Since(since) >= quiet {
			return v
		}
	}
	tb.Fatalf("still moving after %v (at %d)", limit, last)
	return 0
}

// ctWriter writes total pattern bytes to c in the background, counting
// what was written; the returned channel reports the end.
func ctWriter(c net.Conn, total int64, written *atomic.Int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		var off int64
		for off < total {
			n := int64(len(buf))
			if total-off < n {
				n = total - off
			}
			ctPattern(buf[:n], off)
			w, err := c.Write(buf[:n])
			off += int64(w)
			written.Store(off)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

// pauser pauses its connection on the first bytes ("pause") and checks
// the rest against the stream pattern as it counts them.
type pauser struct {
	conn.NopHandler
	opened chan *conn.Conn
	n      atomic.Int64 // pattern bytes received
	bad    atomic.Int64 // 1 + the first offset that differed, or 0
	first  bool
}

func (h *pauser) OnOpen(c *conn.Conn) { h.opened <- c }

func (h *pauser) OnData(c *conn.Conn, data []byte) {
	if !h.first {
		h.first = true
		if string(data) == "pause" {
			c.PauseRead()
			return
		}
	}
	off := h.n.Load()
	if bad := ctCheckPattern(data, off); bad >= 0 && h.bad.Load() == 0 {
		h.bad.Store(bad + 1)
	}
	h.n.Add(int64(len(data)))
}

// TestPauseResume: PauseRead on the loop stops OnData at once and the
// sender stalls in its socket (no receive is armed); PauseRead from
// another goroutine does the same once the loop ran it; ResumeRead
// delivers every byte, in order.
func TestPauseResume(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := &pauser{opened: make(chan *conn.Conn, 1)}
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithReadBuffer(64<<10))
		cl, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		cl.(*net.TCPConn).SetWriteBuffer(64 << 10)
		if _, err := cl.Write([]byte("pause")); err != nil {
			t.Fatal(err)
		}
		var sc *conn.Conn
		select {
		case sc = <-h.opened:
		case <-time.After(10 * time.Second):
			t.Fatal("no connection")
		}
		ctWaitFor(t, 5*time.Second, "the pause", sc.ReadPaused)

		const total = 32 << 20
		var written atomic.Int64
		done := ctWriter(cl, total, &written)
		stalled := ctStalled(t, &written, 300*time.Millisecond, 20*time.Second)
		if stalled >= total {
			t.Fatalf("the peer wrote all %d bytes to a paused connection", total)
		}
		if n := h.n.Load(); n != 0 {
			t.Fatalf("OnData delivered %d bytes after PauseRead on the loop", n)
		}
		t.Logf("the sender stalled after %d bytes", stalled)

		// Resume from another goroutine, then pause from it mid-stream.
		if err := sc.ResumeRead(); err != nil {
			t.Fatal(err)
		}
		ctWaitFor(t, time.Minute, "half the stream", func() bool { return h.n.Load() > total/2 })
		if err := sc.PauseRead(); err != nil {
			t.Fatal(err)
		}
		atPause := ctStalled(t, &h.n, 300*time.Millisecond, 20*time.Second)
		if atPause >= total {
			t.Skip("the stream ended before the second pause took effect")
		}
		if err := sc.ResumeRead(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		ctWaitFor(t, time.Minute, "every byte", func() bool { return h.n.Load() == total })
		if bad := h.bad.Load(); bad != 0 {
			t.Fatalf("stream differs at offset %d", bad-1)
		}
		sc.Close()
		if err := sc.ResumeRead(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ResumeRead after Close: %v, want net.ErrClosed", err)
		}
	})
}

// TestPauseReadWhenUnwritable: an echo server with
// WithPauseReadWhenUnwritable, and a client that writes 1 GiB (64 MiB in
// short mode and under -race) and does not read: the server's Buffered never passes the
// high-water mark plus one receive buffer, its heap does not grow with the
// stream, and once the client reads, every byte comes back in order.
func TestPauseReadWhenUnwritable(t *testing.T) {
	total := int64(1 << 30)
	if testing.Short() || accRace {
		total = 64 << 20
	}
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		const low, high = 32 << 10, 64 << 10
		// One receive buffer: a provided buffer, or the single-shot
		// fallback's, whichever is larger; a resume hands kept bytes over
		// in pieces of the same size.
		recvBuf := int64(max(int(g.Features().BufSize), 16<<10))
		var maxBuffered atomic.Int64
		lean := &leanEcho{maxBuffered: &maxBuffered}
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, lean,
			conn.WithPauseReadWhenUnwritable(true), conn.WithWaterMarks(low, high))
		cl, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()

		runtime.GC()
		runtime.GC() // and the pools' victim caches
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapBefore := ms.HeapAlloc

		var written atomic.Int64
		done := ctWriter(cl, total, &written)
		stalled := ctStalled(t, &written, 300*time.Millisecond, 30*time.Second)
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		growth := int64(ms.HeapAlloc) - int64(heapBefore)
		t.Logf("client stalled after %d bytes; server Buffered max %d (bound %d); heap growth %d",
			stalled, maxBuffered.Load(), high+recvBuf, growth)
		if stalled >= total {
			t.Fatalf("the client wrote all %d bytes without reading", total)
		}
		if m := maxBuffered.Load(); m > high+recvBuf {
			t.Fatalf("Buffered reached %d, above high-water %d + one receive buffer %d", m, high, recvBuf)
		}
		// The heap bound: the outbound queue (Buffered, within the bound
		// above) plus the bytes kept while paused (at most what one
		// batch of completions carried), plus the test's own writer
		// buffer and slack for the runtime (a heap reading moves by
		// about a MiB from run to run).
		if limit := int64(high + recvBuf + 2<<20); growth > limit {
			t.Fatalf("heap grew by %d bytes while the client did not read (limit %d)", growth, limit)
		}

		// The client reads: every byte comes back in order.
		buf := make([]byte, 256<<10)
		var off int64
		cl.SetReadDeadline(time.Now().Add(5 * time.Minute))
		for off < total {
			n, err := cl.Read(buf)
			if bad := ctCheckPattern(buf[:n], off); bad >= 0 {
				t.Fatalf("echo differs at offset %d", bad)
			}
			off += int64(n)
			if err != nil {
				var cerr error
				if p := lean.closeErr.Load(); p != nil {
					cerr = *p
				}
				t.Fatalf("read after %d of %d bytes: %v (server closed with %v)", off, total, err, cerr)
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if m := maxBuffered.Load(); m > high+recvBuf {
			t.Fatalf("Buffered reached %d, above high-water %d + one receive buffer %d", m, high, recvBuf)
		}
		t.Logf("echoed %d bytes; Buffered max %d", total, maxBuffered.Load())
	})
}

// leanEcho echoes and records the largest Buffered seen after a Write.
type leanEcho struct {
	conn.NopHandler
	maxBuffered *atomic.Int64
	closeErr    atomic.Pointer[error]
}

func (h *leanEcho) OnClose(c *conn.Conn, err error) { h.closeErr.Store(&err) }

func (h *leanEcho) OnData(c *conn.Conn, data []byte) {
	c.Write(data)
	if n := int64(c.Buffered()); n > h.maxBuffered.Load() {
		h.maxBuffered.Store(n)
	}
}

// TestHalfCloseOption: under WithHalfClose the peer's FIN is reported by
// OnHalfClose and the connection stays writable: an answer written later
// from another goroutine arrives, then EOF once the handler closes.
func TestHalfCloseOption(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		for _, how := range []string{"close", "closewrite"} {
			t.Run(how, func(t *testing.T) {
				h := &halfCloser{how: how, closed: make(chan error, 1)}
				srv := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithHalfClose(true))
				cl, err := net.Dial("tcp", srv.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer cl.Close()
				if _, err := cl.Write([]byte("question")); err != nil {
					t.Fatal(err)
				}
				if err := cl.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
				cl.SetReadDeadline(time.Now().Add(10 * time.Second))
				got, err := io.ReadAll(cl)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != "late answer to question" {
					t.Fatalf("got %q", got)
				}
				select {
				case err := <-h.closed:
					want := error(nil)
					if how == "closewrite" {
						want = io.EOF
					}
					if err != want {
						t.Fatalf("OnClose: %v, want %v", err, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("no OnClose")
				}
			})
		}
	})
}

// halfCloser answers after the peer's FIN, from a goroutine, later.
type halfCloser struct {
	conn.NopHandler
	how    string
	q      []byte
	closed chan error
}

func (h *halfCloser) OnData(c *conn.Conn, data []byte) { h.q = append(h.q, data...) }
func (h *halfCloser) OnHalfClose(c *conn.Conn) {
	q := string(h.q)
	go func() {
		// Later: once a task queued now ran, OnHalfClose has returned.
		returned := make(chan struct{})
		if err := c.Loop().Execute(func() { close(returned) }); err != nil {
			panic(err)
		}
		<-returned
		if _, err := c.Write([]byte("late answer to " + q)); err != nil {
			panic(err)
		}
		if h.how == "close" {
			c.Close()
		} else {
			c.CloseWrite()
		}
	}()
}
func (h *halfCloser) OnClose(c *conn.Conn, err error) { h.closed <- err }
