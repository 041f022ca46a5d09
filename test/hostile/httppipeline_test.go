package hostile

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// HTTP/1.1 pipelining, with default options: a client writes 16 GET
// requests in one write and then reads the 16 answers, each with a 100 KB
// body, so the answers to one receive pass the connection's high-water
// mark many times over. Every request is answered, in order, on net/http
// served over the adapter and on an HTTP/1.1 server written on the
// callback API that stops consuming while unwritable.

const (
	pipelineDepth = 16
	pipelineBody  = 100_000
)

// pipeBody returns the body of the answer to request i.
func pipeBody(i int) []byte { return bytes.Repeat([]byte{'a' + byte(i%26)}, pipelineBody) }

// pipeHandler is the net/http handler: GET /<i> answers pipeBody(i).
var pipeHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	i, err := strconv.Atoi(r.URL.Path[1:])
	if err != nil {
		http.Error(w, "bad path", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(pipelineBody))
	w.Write(pipeBody(i))
})

// httpAnswerer is an HTTP/1.1 server on the callback API, a handler per
// connection: it answers each complete GET request with pipeBody(i), and
// stops consuming while the connection is unwritable, pausing reading
// until it is writable again.
type httpAnswerer struct {
	conn.NopHandler
	scanned int  // bytes past the consumed ones searched for the header's end
	paused  bool // reading paused by the handler while unwritable
}

var headerEnd = []byte("\r\n\r\n")

func (h *httpAnswerer) OnRead(c *conn.Conn, data []byte) (consumed int) {
	for consumed < len(data) {
		if !c.Writable() {
			h.paused = true
			c.PauseRead()
			return consumed
		}
		from := max(0, h.scanned-len(headerEnd)+1)
		i := bytes.Index(data[consumed+from:], headerEnd)
		if i < 0 {
			h.scanned = len(data) - consumed
			if h.scanned > 64<<10 {
				c.Write([]byte("HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
				c.Close()
			}
			return consumed
		}
		end := consumed + from + i + len(headerEnd)
		req := data[consumed:end]
		consumed, h.scanned = end, 0
		// The request line: GET /<i> HTTP/1.1; headers are ignored, and
		// a request with a body is not expected.
		line, _, _ := bytes.Cut(req, []byte("\r\n"))
		f := bytes.Fields(line)
		n := -1
		if len(f) == 3 && string(f[0]) == "GET" && len(f[1]) > 1 && f[1][0] == '/' {
			n, _ = strconv.Atoi(string(f[1][1:]))
		}
		if n < 0 {
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
			c.Close()
			return consumed
		}
		c.Writev([][]byte{fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", pipelineBody), pipeBody(n)})
	}
	return consumed
}

func (h *httpAnswerer) OnWritabilityChanged(c *conn.Conn, writable bool) {
	if writable && h.paused {
		h.paused = false
		c.ResumeRead()
	}
}

// pipelineClients runs conns clients that each, for rounds rounds, write
// pipelineDepth GET requests in one write and read their answers, checking
// each. It returns the first failures.
func pipelineClients(addr string, conns, rounds int) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for id := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pipelineClient(addr, id, rounds); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("client %d: %w", id, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

func pipelineClient(addr string, id, rounds int) error {
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for r := range rounds {
		var reqs []byte
		for i := range pipelineDepth {
			reqs = fmt.Appendf(reqs, "GET /%d HTTP/1.1\r\nHost: pipeline\r\nUser-Agent: hostile\r\n\r\n", id*pipelineDepth+i)
		}
		// A generous bound on each round: a stall fails it.
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(reqs); err != nil {
			return fmt.Errorf("round %d: write: %w", r, err)
		}
		for i := range pipelineDepth {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return fmt.Errorf("round %d: answer %d of %d: %w", r, i+1, pipelineDepth, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return fmt.Errorf("round %d: answer %d of %d: body: %w", r, i+1, pipelineDepth, err)
			}
			if resp.StatusCode != http.StatusOK || !bytes.Equal(body, pipeBody(id*pipelineDepth+i)) {
				return fmt.Errorf("round %d: answer %d of %d: %s with %d bytes, want 200 with %d bytes of %q",
					r, i+1, pipelineDepth, resp.Status, len(body), pipelineBody, 'a'+byte((id*pipelineDepth+i)%26))
			}
		}
	}
	return nil
}

// checkPipeline runs the clients against addr and reports their failures.
func checkPipeline(t *testing.T, addr string) {
	t.Helper()
	conns, rounds := scale(8, 4), scale(8, 2)
	start := time.Now()
	errs := pipelineClients(addr, conns, rounds)
	t.Logf("%d clients × %d rounds of %d pipelined GETs with %d-byte answers in %v: %d clients failed",
		conns, rounds, pipelineDepth, pipelineBody, time.Since(start).Round(time.Millisecond), len(errs))
	for i, err := range errs {
		if i == 5 {
			t.Errorf("and %d more", len(errs)-5)
			break
		}
		t.Error(err)
	}
}

// serveHTTP serves pipeHandler with net/http on ln until the test ends.
func serveHTTP(t *testing.T, ln net.Listener) {
	srv := &http.Server{Handler: pipeHandler, ReadHeaderTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	t.Cleanup(func() { srv.Close(); <-done })
}

// TestHTTPPipelinedRequestsAnswered: 16 GET requests written at once,
// each answered with 100 KB, with default options: net/http over the
// adapter (a group on its own threads, and one on a shared thread) and an
// HTTP/1.1 ReadHandler on the callback API answer every request, in
// order, as net/http does on net.Listen.
func TestHTTPPipelinedRequestsAnswered(t *testing.T) {
	t.Run("server=net/http-net.Listen", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, ln)
		checkPipeline(t, ln.Addr().String())
	})
	for _, shared := range []bool{false, true} {
		name := "server=net/http-ListenNet"
		if shared {
			name += "-shared-thread"
		}
		t.Run(name, func(t *testing.T) {
			backends(t, func(t *testing.T, b loop.Backend) {
				g := newGroupWith(t, b, 2, loop.WithSharedThread(shared))
				ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				serveHTTP(t, ln)
				checkPipeline(t, ln.Addr().String())
			})
		})
	}
	t.Run("server=ReadHandler", func(t *testing.T) {
		backends(t, func(t *testing.T, b loop.Backend) {
			g := newGroup(t, b, 2)
			srv, err := conn.ListenFunc(context.Background(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler { return new(httpAnswerer) })
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			checkPipeline(t, srv.Addr().String())
		})
	})
}
