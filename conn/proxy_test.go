package conn_test

import (
	"crypto/sha256"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// ctPatternReader yields n bytes of the stream pattern starting at offset
// seed, optionally pausing every step bytes (a slow side).
type ctPatternReader struct {
	off, n int64
}

func (r *ctPatternReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n)]
	ctPattern(p, r.off)
	r.off += int64(len(p))
	r.n -= int64(len(p))
	return len(p), nil
}

// slowReader reads from r with a pause every step bytes.
type slowReader struct {
	r     io.Reader
	step  int64
	since int64
	pause time.Duration
}

func (s *slowReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.since += int64(n)
	if s.since >= s.step {
		s.since = 0
		time.Sleep(s.pause)
	}
	return n, err
}

// TestProxy relays 256 MiB each way (32 MiB in short mode and under -race)
// through the proxy of ExampleDialAsync, between a fast client and a
// backend that reads slowly: both streams arrive intact (SHA-256), every
// connection closes, and the proxy's memory stays bounded: no side's
// outbound buffer passes the high-water mark plus one receive buffer, and
// the heap does not grow with the stream.
func TestProxy(t *testing.T) {
	total := int64(256 << 20)
	if testing.Short() || accRace {
		total = 32 << 20
	}
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)

		// The backend: reads the client's stream slowly and hashes it,
		// while sending its own stream (offset 1<<40 of the pattern) at
		// full speed; then half-closes.
		bl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer bl.Close()
		backendGot := make(chan []byte, 1)
		backendErr := make(chan error, 2)
		go func() {
			c, err := bl.Accept()
			if err != nil {
				backendErr <- err
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Minute))
			wrote := make(chan struct{})
			go func() {
				defer close(wrote)
				_, err := io.Copy(c, &ctPatternReader{off: 1 << 40, n: total})
				if err == nil {
					err = c.(*net.TCPConn).CloseWrite()
				}
				backendErr <- err
			}()
			h := sha256.New()
			_, err = io.Copy(h, &slowReader{r: c, step: 1 << 20, pause: time.Millisecond})
			backendErr <- err
			backendGot <- h.Sum(nil)
			<-wrote // the stream the other way may still be going out
			c.Close()
		}()

		var maxBuffered atomic.Int64
		closes := make(chan error, 2)
		const high = conn.DefaultHighWaterMark
		proxy, err := listenProxy(g, bl.Addr().String(), func(err error) { closes <- err }, &maxBuffered)
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		stop := make(chan struct{})
		var maxHeap atomic.Uint64
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapBefore := ms.HeapAlloc
		sampled := make(chan struct{})
		go func() {
			// Samples the live heap (after a collection) as the stream
			// runs.
			defer close(sampled)
			var ms runtime.MemStats
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				runtime.GC()
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > maxHeap.Load() {
					maxHeap.Store(ms.HeapAlloc)
				}
			}
		}()

		c, err := net.Dial("tcp", proxy.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Minute))
		clientErr := make(chan error, 1)
		go func() {
			_, err := io.Copy(c, &ctPatternReader{off: 0, n: total})
			if err == nil {
				err = c.(*net.TCPConn).CloseWrite()
			}
			clientErr <- err
		}()
		start := time.Now()
		h := sha256.New()
		n, err := io.Copy(h, c)
		if err != nil || n != total {
			t.Fatalf("client received %d of %d bytes: %v", n, total, err)
		}
		if err := <-clientErr; err != nil {
			t.Fatal(err)
		}
		want := sha256.New()
		io.Copy(want, &ctPatternReader{off: 1 << 40, n: total})
		if string(h.Sum(nil)) != string(want.Sum(nil)) {
			t.Fatal("the backend's stream arrived altered")
		}
		want.Reset()
		io.Copy(want, &ctPatternReader{off: 0, n: total})
		select {
		case got := <-backendGot:
			if string(got) != string(want.Sum(nil)) {
				t.Fatal("the client's stream arrived altered")
			}
		case <-time.After(time.Minute):
			t.Fatal("the backend did not finish")
		}
		for range 2 {
			if err := <-backendErr; err != nil {
				t.Fatal(err)
			}
		}
		elapsed := time.Since(start)
		close(stop)
		<-sampled
		select {
		case err := <-closes:
			if err != nil && err != io.EOF {
				t.Fatalf("frontend closed with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the frontend did not close")
		}
		ctWaitFor(t, 10*time.Second, "the proxy's connections to close", func() bool { return proxy.Conns() == 0 })
		growth := int64(maxHeap.Load()) - int64(heapBefore)
		recvBuf := int64(max(int(g.Features().BufSize), 16<<10))
		t.Logf("%d bytes each way in %v; Buffered at most %d (bound %d); live heap growth at most %d bytes",
			total, elapsed, maxBuffered.Load(), high+recvBuf, growth)
		if m := maxBuffered.Load(); m > high+recvBuf {
			t.Fatalf("an outbound buffer reached %d bytes, above high-water %d + one receive buffer %d", m, high, recvBuf)
		}
		// The stream is total bytes each way; the proxy holds at most
		// two outbound queues (high-water + one receive buffer each) and
		// the bytes kept while paused: up to one provided-buffer ring's
		// worth per connection, which the kernel may fill before the
		// pause's cancel lands (4 MiB with 256 × 16 KiB buffers). The
		// rest of the growth is the test's own buffers and the runtime's.
		f := g.Features()
		if limit := int64(8<<20) + 2*int64(f.BufCount)*int64(f.BufSize); growth > limit {
			t.Fatalf("heap grew by %d bytes relaying %d bytes each way (limit %d)", growth, total, limit)
		}
	})
}
