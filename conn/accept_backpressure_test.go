package conn_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// accPump writes a deterministic stream of total bytes to each connection it
// opens, only while the connection is Writable, and resumes when it becomes
// writable again. Byte o of the stream is block[o % len(block)].
type accPump struct {
	conn.NopHandler
	block []byte // len(block) is a multiple of chunk
	chunk int
	total int64

	sent      atomic.Int64 // bytes accepted by Write
	maxBuf    atomic.Int64 // largest Buffered() seen after a Write
	unwritten atomic.Int64 // OnWritabilityChanged(false) calls
	rewritten atomic.Int64 // OnWritabilityChanged(true) calls
	closed    chan error
	conn      atomic.Pointer[conn.Conn]
}

func (p *accPump) OnOpen(c *conn.Conn) {
	p.conn.Store(c)
	p.pump(c)
}

func (p *accPump) OnWritabilityChanged(c *conn.Conn, writable bool) {
	if writable {
		p.rewritten.Add(1)
		p.pump(c)
	} else {
		p.unwritten.Add(1)
	}
}

func (p *accPump) OnClose(c *conn.Conn, err error) { p.closed <- err }

// pump runs on c's loop, so sent needs no synchronisation with itself.
func (p *accPump) pump(c *conn.Conn) {
	for sent := p.sent.Load(); sent < p.total && c.Writable(); sent = p.sent.Load() {
		off := int(sent % int64(len(p.block)))
		if _, err := c.Write(p.block[off : off+p.chunk]); err != nil {
			return
		}
		p.sent.Add(int64(p.chunk))
		if n := int64(c.Buffered()); n > p.maxBuf.Load() {
			p.maxBuf.Store(n)
		}
	}
}

// TestAcceptanceBackpressure: the server writes 1 GiB to a client that stops
// reading (three times, 200 ms each) while the server only writes when
// Writable and resumes on OnWritabilityChanged(true). The server's outbound
// buffer and the Go heap stay below the high-water mark plus a constant,
// writability toggles, and every byte arrives, in order, once the client
// reads again.
func TestAcceptanceBackpressure(t *testing.T) {
	const (
		low, high = 32 << 10, 64 << 10
		chunk     = 16 << 10
		// heapSlack covers what the GC lets accumulate before a cycle (the
		// heap goal is at least 4 MiB) and the test's own bookkeeping.
		heapSlack = 8 << 20
	)
	total := int64(accSize(1<<30, 64<<20))
	block := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{2}).Read(block)
	h := sha256.New() // the digest of the whole stream
	for o := int64(0); o < total; o += int64(len(block)) {
		h.Write(block[:min(int64(len(block)), total-o)])
	}
	wantSum := h.Sum(nil)

	accForEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.Watchdog(t, 3*time.Minute)
		g := accGroup(t, b, loop.WithLoops(1))
		p := &accPump{block: block, chunk: chunk, total: total, closed: make(chan error, 1)}
		srv := accListen(t, g, p, conn.WithWaterMarks(low, high))
		buf := make([]byte, 256<<10)

		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapBase := ms.HeapAlloc
		var heapMax atomic.Uint64
		stopSampling := make(chan struct{})
		sampled := make(chan struct{})
		go func() { // sample the heap every 10 ms while the stream runs
			defer close(sampled)
			var ms runtime.MemStats
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stopSampling:
					return
				case <-tick.C:
					runtime.ReadMemStats(&ms)
					if ms.HeapAlloc > heapMax.Load() {
						heapMax.Store(ms.HeapAlloc)
					}
				}
			}
		}()

		start := time.Now()
		c, err := net.DialTimeout("tcp", srv.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))

		got := sha256.New()
		var read int64
		var liveGrowth uint64
		pauses := []int64{0, total / 3, 2 * total / 3} // stop reading at these offsets
		for len(pauses) > 0 || read < total {
			if len(pauses) > 0 && read >= pauses[0] {
				pauses = pauses[1:]
				// The client stops reading: the server becomes
				// unwritable (unless it has sent everything).
				if !testutil.Eventually(30*time.Second, func() bool {
					sc := p.conn.Load()
					return p.sent.Load() >= total || sc != nil && !sc.Writable()
				}) {
					t.Errorf("at %d bytes: the server is still writable 30 s after the client stopped reading", read)
				}
				if liveGrowth == 0 { // the live heap while the server is blocked
					runtime.GC()
					runtime.ReadMemStats(&ms)
					liveGrowth = ms.HeapAlloc - min(ms.HeapAlloc, heapBase)
				}
				continue
			}
			n, err := c.Read(buf[:min(int64(len(buf)), total-read)])
			if n > 0 {
				if !accStreamEqual(block, read, buf[:n]) {
					t.Fatalf("bytes %d..%d differ from the stream", read, read+int64(n))
				}
				got.Write(buf[:n])
				read += int64(n)
			}
			if err != nil {
				var state string
				if sc := p.conn.Load(); sc != nil {
					state = fmt.Sprintf("; server: sent %d, Buffered %d, Writable %v, false ×%d, true ×%d; loop stats %+v",
						p.sent.Load(), sc.Buffered(), sc.Writable(), p.unwritten.Load(), p.rewritten.Load(), g.Stats().Total)
				}
				t.Fatalf("read after %d of %d bytes: %v%s", read, total, err, state)
			}
		}
		took := time.Since(start)
		close(stopSampling)
		<-sampled

		growth := heapMax.Load() - min(heapMax.Load(), heapBase)
		t.Logf("%d MiB in %v (%.0f MiB/s); water marks %d/%d, chunk %d: max Buffered %d B, heap growth max %d B (live while blocked %d B); writability false ×%d, true ×%d",
			total>>20, took.Round(time.Millisecond), float64(total)/(1<<20)/took.Seconds(), low, high, chunk,
			p.maxBuf.Load(), growth, liveGrowth, p.unwritten.Load(), p.rewritten.Load())
		if read != total || !bytes.Equal(got.Sum(nil), wantSum) {
			t.Errorf("received %d bytes with a different digest, want %d", read, total)
		}
		if m := p.maxBuf.Load(); m > high+chunk {
			t.Errorf("Buffered() reached %d bytes, want ≤ high-water mark + one write (%d)", m, high+chunk)
		}
		if growth > high+chunk+heapSlack {
			t.Errorf("heap grew by %d bytes, want ≤ %d (high-water mark + write + %d slack)", growth, high+chunk+heapSlack, heapSlack)
		}
		if p.unwritten.Load() < 3 || p.rewritten.Load() < 3 {
			t.Errorf("writability went false %d and true %d times, want ≥ 3 each", p.unwritten.Load(), p.rewritten.Load())
		}
		if n := g.Stats().Total.StaleCompletions; n != 0 {
			t.Errorf("%d stale completions", n)
		}
	})
}

// accStreamEqual reports whether p equals the block-repeating stream at
// offset o (p is never longer than block).
func accStreamEqual(block []byte, o int64, p []byte) bool {
	off := int(o % int64(len(block)))
	first := min(len(p), len(block)-off)
	return bytes.Equal(p[:first], block[off:off+first]) && bytes.Equal(p[first:], block[:len(p)-first])
}
