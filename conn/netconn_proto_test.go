package conn_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// Tests that real protocols (net/http, HTTP/2, crypto/tls, an io.Copy
// proxy, curl as an outside client) run unchanged on NetConn and
// NetListener. Helpers start with "np".

// npListen listens on 127.0.0.1:0 with ListenNet, closed when the test
// ends.
func npListen(t *testing.T, g *loop.Group) *conn.NetListener {
	t.Helper()
	ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("ListenNet: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// npHTTP is an http.Server serving on a NetListener.
type npHTTP struct {
	srv    *http.Server
	ln     *conn.NetListener
	url    string // http://127.0.0.1:port
	done   chan struct{}
	err    error // what Serve returned, once done is closed
	states npStates
}

// npStates counts the server's connection state changes.
type npStates struct {
	mu     sync.Mutex
	counts map[http.ConnState]int
	cur    map[net.Conn]http.ConnState
	bad    []string
}

func (s *npStates) hook(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts, s.cur = map[http.ConnState]int{}, map[net.Conn]http.ConnState{}
	}
	s.counts[st]++
	s.cur[c] = st
	if st == http.StateNew {
		under := c
		if tc, ok := c.(*tls.Conn); ok {
			under = tc.NetConn()
		}
		if _, ok := under.(*conn.NetConn); !ok {
			s.bad = append(s.bad, fmt.Sprintf("%T over %T", c, under))
		}
	}
}

func (s *npStates) count(st http.ConnState) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[st]
}

// in returns how many connections are in state st now.
func (s *npStates) in(st http.ConnState) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.cur {
		if v == st {
			n++
		}
	}
	return n
}

// npServeHTTP serves srv on a new NetListener of g: with Serve when mode
// is "", ServeTLS when "ServeTLS", Serve on a tls.NewListener of it when
// "TLSListener". The server is closed, and Serve awaited, when the test
// ends.
func npServeHTTP(t *testing.T, g *loop.Group, srv *http.Server, mode string) *npHTTP {
	t.Helper()
	h := &npHTTP{srv: srv, ln: npListen(t, g), done: make(chan struct{})}
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		h.states.hook(c, st)
		if prev != nil {
			prev(c, st)
		}
	}
	scheme := "http"
	go func() {
		defer close(h.done)
		switch mode {
		case "":
			h.err = srv.Serve(h.ln)
		case "ServeTLS":
			h.err = srv.ServeTLS(h.ln, "", "")
		case "TLSListener":
			h.err = srv.Serve(tls.NewListener(h.ln, srv.TLSConfig))
		}
	}()
	if mode != "" {
		scheme = "https"
	}
	h.url = scheme + "://" + h.ln.Addr().String()
	t.Cleanup(func() {
		srv.Close()
		select {
		case <-h.done:
			if !errors.Is(h.err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", h.err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return within 5s of Close")
		}
		h.states.mu.Lock()
		defer h.states.mu.Unlock()
		if len(h.states.bad) > 0 {
			t.Errorf("the server got connections of types %v, want *conn.NetConn", h.states.bad)
		}
	})
	return h
}

// npTransport returns an http.Transport that dials with DialNet on g and
// counts its dials; its idle connections are closed when the test ends.
func npTransport(t *testing.T, g *loop.Group, dials *atomic.Int32) *http.Transport {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials != nil {
				dials.Add(1)
			}
			c, err := conn.DialNet(ctx, g, network, addr)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		MaxIdleConnsPerHost:   16,
		ResponseHeaderTimeout: 20 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// npSum returns the SHA-256 of n bytes of the stream pattern at off.
func npSum(off, n int64) [32]byte {
	h := sha256.New()
	io.CopyBuffer(h, &ctPatternReader{off: off, n: n}, make([]byte, 256<<10))
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// npHashReader hashes everything read from r; it returns the sum and the
// byte count.
func npHashReader(r io.Reader) ([32]byte, int64, error) {
	h := sha256.New()
	n, err := io.CopyBuffer(h, r, make([]byte, 256<<10))
	var s [32]byte
	h.Sum(s[:0])
	return s, n, err
}

// TestNetConnHTTPKeepAlive: 100 sequential requests of one http.Client to
// an http.Server on a NetListener reuse one connection.
func TestNetConnHTTPKeepAlive(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		hs := npServeHTTP(t, g, &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "reply %s", r.URL.Query().Get("i"))
			}),
		}, "")
		var dials atomic.Int32
		client := &http.Client{Transport: npTransport(t, g, &dials), Timeout: 20 * time.Second}
		reused := 0
		for i := range 100 {
			trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
				if info.Reused {
					reused++
				}
			}}
			req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
				"GET", fmt.Sprintf("%s/?i=%d", hs.url, i), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("request %d: reading the body: %v", i, err)
			}
			if want := fmt.Sprintf("reply %d", i); string(body) != want || resp.StatusCode != 200 {
				t.Fatalf("request %d: %d %q, want 200 %q", i, resp.StatusCode, body, want)
			}
		}
		if n := hs.states.count(http.StateNew); n != 1 {
			t.Errorf("the server saw %d new connections, want 1", n)
		}
		if n := dials.Load(); n != 1 {
			t.Errorf("the client dialed %d times, want 1", n)
		}
		if reused != 99 {
			t.Errorf("%d requests reused the connection, want 99", reused)
		}
	})
}

// TestNetConnHTTPChunked sends a request body of unknown length (chunked)
// and gets back a response flushed in pieces (chunked), the first piece
// arriving while the handler still runs.
func TestNetConnHTTPChunked(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		const pieces = 200
		firstSeen := make(chan struct{})
		type reqInfo struct {
			te     []string
			length int64
			sum    [32]byte
			n      int64
		}
		got := make(chan reqInfo, 1)
		hs := npServeHTTP(t, g, &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sum, n, err := npHashReader(r.Body)
				if err != nil {
					t.Errorf("handler: reading the body: %v", err)
				}
				got <- reqInfo{r.TransferEncoding, r.ContentLength, sum, n}
				// Echo the pattern back in pieces, flushing each; after
				// the first, wait until the client has it.
				fl := w.(http.Flusher)
				var off int64
				buf := make([]byte, 8192)
				for i := range pieces {
					k := 1 + (i*7919)%len(buf)
					ctPattern(buf[:k], off)
					if _, err := w.Write(buf[:k]); err != nil {
						t.Errorf("handler: write: %v", err)
						return
					}
					off += int64(k)
					fl.Flush()
					if i == 0 {
						select {
						case <-firstSeen:
						case <-time.After(5 * time.Second):
							t.Errorf("handler: the client did not get the first flushed piece within 5s")
							return
						}
					}
				}
			}),
		}, "")
		client := &http.Client{Transport: npTransport(t, g, nil), Timeout: 20 * time.Second}

		// The request body: pieces of the pattern written into a pipe.
		pr, pw := io.Pipe()
		var sent int64
		go func() {
			buf := make([]byte, 8192)
			for i := range pieces {
				k := 1 + (i*104729)%len(buf)
				ctPattern(buf[:k], sent)
				if _, err := pw.Write(buf[:k]); err != nil {
					pw.CloseWithError(err)
					return
				}
				sent += int64(k)
			}
			pw.Close()
		}()
		req, err := http.NewRequest("POST", hs.url+"/chunked", pr)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()

		var ri reqInfo
		select {
		case ri = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler did not report the request within 10s")
		}
		if len(ri.te) != 1 || ri.te[0] != "chunked" || ri.length != -1 {
			t.Errorf("request: TransferEncoding %q ContentLength %d, want [chunked] -1", ri.te, ri.length)
		}
		if want := npSum(0, sent); ri.sum != want || ri.n != sent {
			t.Errorf("request body: %d bytes sha256 %x, want %d bytes %x", ri.n, ri.sum, sent, want)
		}

		if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || resp.ContentLength != -1 {
			t.Errorf("response: TransferEncoding %q ContentLength %d, want [chunked] -1", resp.TransferEncoding, resp.ContentLength)
		}
		first := make([]byte, 1)
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Fatalf("reading the first piece: %v", err)
		}
		close(firstSeen)
		rest, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		body := append(first, rest...)
		var want int64
		for i := range pieces {
			want += int64(1 + (i*7919)%8192)
		}
		if int64(len(body)) != want {
			t.Fatalf("response: %d bytes, want %d", len(body), want)
		}
		if off := ctCheckPattern(body, 0); off >= 0 {
			t.Fatalf("response differs from the pattern at offset %d", off)
		}
	})
}

// TestNetConnHTTPLarge uploads and downloads 16 MiB, checking SHA-256 on
// both sides.
func TestNetConnHTTPLarge(t *testing.T) {
	const size = 16 << 20
	const downOff = 1 << 30 // the download's pattern offset
	upSum, downSum := npSum(0, size), npSum(downOff, size)
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		mux := http.NewServeMux()
		mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
			sum, n, err := npHashReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			if sum != upSum || n != size {
				t.Errorf("server: upload of %d bytes sha256 %x, want %d bytes %x", n, sum, size, upSum)
			}
			fmt.Fprintf(w, "%x %d", sum, n)
		})
		mux.HandleFunc("GET /download", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(size))
			w.Header().Set("X-Sha256", hex.EncodeToString(downSum[:]))
			h := sha256.New()
			n, err := io.CopyBuffer(io.MultiWriter(w, h), &ctPatternReader{off: downOff, n: size}, make([]byte, 128<<10))
			if err != nil {
				t.Errorf("server: download: %v after %d bytes", err, n)
				return
			}
			if s := h.Sum(nil); !bytes.Equal(s, downSum[:]) {
				t.Errorf("server: sent sha256 %x, want %x", s, downSum)
			}
		})
		hs := npServeHTTP(t, g, &http.Server{Handler: mux}, "")
		client := &http.Client{Transport: npTransport(t, g, nil), Timeout: 30 * time.Second}

		t.Run("upload", func(t *testing.T) {
			req, err := http.NewRequest("POST", hs.url+"/upload", &ctPatternReader{n: size})
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = size
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%x %d", upSum, size); resp.StatusCode != 200 || string(body) != want {
				t.Fatalf("upload: %d %q, want 200 %q", resp.StatusCode, body, want)
			}
		})
		t.Run("download", func(t *testing.T) {
			resp, err := client.Get(hs.url + "/download")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.ContentLength != size {
				t.Errorf("Content-Length %d, want %d", resp.ContentLength, size)
			}
			sum, n, err := npHashReader(resp.Body)
			if err != nil {
				t.Fatalf("download: %v after %d bytes", err, n)
			}
			if n != size || sum != downSum || resp.Header.Get("X-Sha256") != hex.EncodeToString(sum[:]) {
				t.Fatalf("download: %d bytes sha256 %x, server's %s, want %d bytes %x", n, sum, resp.Header.Get("X-Sha256"), size, downSum)
			}
		})
	})
}

// TestNetConnHTTPReadTimeout: a client that sends half its headers and
// stalls is cut off by http.Server.ReadTimeout.
func TestNetConnHTTPReadTimeout(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		var handled atomic.Int32
		hs := npServeHTTP(t, g, &http.Server{
			ReadTimeout: readTimeout,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				handled.Add(1)
			}),
		}, "")
		start := time.Now()
		c, err := net.DialTimeout("tcp", hs.ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: stall"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		data, err := io.ReadAll(c)
		elapsed := time.Since(start)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server kept the stalled connection open for 5s (ReadTimeout %v)", readTimeout)
		}
		t.Logf("cut off after %v (ReadTimeout %v): %d bytes, err %v", elapsed, readTimeout, len(data), err)
		if elapsed < readTimeout-50*time.Millisecond || elapsed > 2*time.Second {
			t.Errorf("cut off after %v, want about ReadTimeout %v and within 2s", elapsed, readTimeout)
		}
		if len(data) > 0 && !bytes.HasPrefix(data, []byte("HTTP/1.1 4")) {
			t.Errorf("the server answered %q", data)
		}
		if handled.Load() != 0 {
			t.Errorf("the handler ran for an incomplete request")
		}
		ctWaitFor(t, 2*time.Second, "the server to record the connection closed", func() bool {
			return hs.states.count(http.StateClosed) == 1
		})
	})
}

// TestNetConnHTTPShutdown: http.Server.Shutdown closes an idle keep-alive
// connection at once, waits for an in-flight request, returns nil, and
// nothing is left behind.
func TestNetConnHTTPShutdown(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t) // first, so its check runs after every other cleanup
		g := ctGroup(t, b, 2)
		started, release := make(chan struct{}), make(chan struct{})
		mux := http.NewServeMux()
		mux.HandleFunc("/fast", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fast") })
		mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
			close(started)
			select {
			case <-release:
			case <-time.After(10 * time.Second):
				t.Errorf("slow handler: not released within 10s")
			}
			io.WriteString(w, "slow done")
		})
		srv := &http.Server{Handler: mux}
		hs := npServeHTTP(t, g, srv, "")
		trIdle := npTransport(t, g, nil)
		trSlow := npTransport(t, g, nil)

		// An idle keep-alive connection.
		resp, err := (&http.Client{Transport: trIdle, Timeout: 10 * time.Second}).Get(hs.url + "/fast")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != "fast" {
			t.Fatalf("/fast: %q, %v", body, err)
		}
		ctWaitFor(t, 2*time.Second, "the keep-alive connection to go idle", func() bool {
			return hs.states.in(http.StateIdle) == 1
		})

		// An in-flight slow request.
		type result struct {
			body  string
			err   error
			early bool // it ended before the release
		}
		var released atomic.Bool
		slow := make(chan result, 1)
		go func() {
			resp, err := (&http.Client{Transport: trSlow, Timeout: 20 * time.Second}).Get(hs.url + "/slow")
			if err != nil {
				slow <- result{err: err, early: !released.Load()}
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			slow <- result{string(body), err, !released.Load()}
		}()
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("the slow request did not reach its handler within 5s")
		}

		shut := make(chan error, 1)
		var shutEarly atomic.Bool // Shutdown returned before the release
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			err := srv.Shutdown(ctx)
			shutEarly.Store(!released.Load())
			shut <- err
		}()
		// Serve returns, the listener is closed and the idle connection
		// goes, while the slow request is still in its handler.
		select {
		case <-hs.done:
			if !errors.Is(hs.err, http.ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", hs.err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Serve did not return within 2s of Shutdown")
		}
		ctWaitFor(t, 2*time.Second, "Shutdown to close the idle connection", func() bool {
			return hs.states.count(http.StateClosed) == 1
		})
		if c, err := conn.DialNet(context.Background(), g, "tcp", hs.ln.Addr().String()); err == nil {
			c.Close()
			t.Errorf("a dial after Shutdown succeeded")
		}
		// Neither Shutdown nor the slow request may end before the
		// release: each notes whether it did.
		released.Store(true)
		close(release)
		select {
		case r := <-slow:
			if r.early {
				t.Fatalf("the slow request ended before its release: %q, %v", r.body, r.err)
			}
			if r.err != nil || r.body != "slow done" {
				t.Errorf("slow request: %q, %v", r.body, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the slow request did not complete within 5s of its release")
		}
		select {
		case err := <-shut:
			if shutEarly.Load() {
				t.Fatalf("Shutdown returned %v while a request was in flight", err)
			}
			if err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Shutdown did not return within 5s of the last request's end")
		}
		ctWaitFor(t, 2*time.Second, "every connection closed", func() bool {
			return hs.states.count(http.StateClosed) == 2
		})
		if n := hs.states.count(http.StateNew); n != 2 {
			t.Errorf("%d connections, want 2", n)
		}

		// The goroutines of the server and both transports are gone
		// (testutil.CheckLeaks checks again, with fds, after the group's
		// shutdown).
		trIdle.CloseIdleConnections()
		trSlow.CloseIdleConnections()
		ctWaitFor(t, 2*time.Second, "net/http's goroutines to exit", func() bool {
			s := string(testutil.AllStacks())
			return !strings.Contains(s, "net/http.(*conn).serve") &&
				!strings.Contains(s, "net/http.(*persistConn)") &&
				!strings.Contains(s, "net/http.(*Server).Serve")
		})
	})
}

// TestNetConnHTTPCurl serves curl: two URLs on one keep-alive connection,
// and a POST of a 1 MiB file whose SHA-256 the handler echoes.
func TestNetConnHTTPCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skipf("curl not found on PATH: %v", err)
	}
	file := filepath.Join(t.TempDir(), "body")
	const size = 1 << 20
	data := make([]byte, size)
	ctPattern(data, 12345)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	fileSum := sha256.Sum256(data)
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// -q first: no ~/.curlrc; no proxy from the environment.
		cmd := exec.CommandContext(ctx, curl, append([]string{"-q", "-sS", "--noproxy", "*", "--max-time", "15"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl %q: %v\n%s", args, err, stderr.Bytes())
		}
		return string(out)
	}
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		mux := http.NewServeMux()
		mux.HandleFunc("GET /alpha", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "alpha") })
		mux.HandleFunc("GET /beta", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "beta") })
		mux.HandleFunc("POST /sha", func(w http.ResponseWriter, r *http.Request) {
			sum, n, err := npHashReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			fmt.Fprintf(w, "%x %d", sum, n)
		})
		hs := npServeHTTP(t, g, &http.Server{Handler: mux}, "")

		t.Run("keepalive", func(t *testing.T) {
			out := run(t, "-w", "|%{http_code}|%{num_connects}\n", hs.url+"/alpha", hs.url+"/beta")
			if want := "alpha|200|1\nbeta|200|0\n"; out != want {
				t.Errorf("curl output %q, want %q", out, want)
			}
			if n := hs.states.count(http.StateNew); n != 1 {
				t.Errorf("the server saw %d connections, want 1", n)
			}
		})
		t.Run("post", func(t *testing.T) {
			out := run(t, "-H", "Content-Type: application/octet-stream", "--data-binary", "@"+file, hs.url+"/sha")
			if want := fmt.Sprintf("%x %d", fileSum, size); out != want {
				t.Errorf("curl POST: server answered %q, want %q", out, want)
			}
		})
	})
}

// npCert makes a self-signed ECDSA certificate for 127.0.0.1 and
// localhost, and a pool that trusts it.
func npCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ringloop test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// npExchange writes n bytes of the pattern at sendOff to c and closes its
// writing side, while reading until EOF what c receives, which must be n
// bytes of the pattern at recvOff.
func npExchange(c io.ReadWriter, closeWrite func() error, n, sendOff, recvOff int64) error {
	werr := make(chan error, 1)
	go func() {
		_, err := io.CopyBuffer(c, &ctPatternReader{off: sendOff, n: n}, make([]byte, 64<<10))
		if err == nil {
			err = closeWrite()
		}
		werr <- err
	}()
	var got int64
	buf := make([]byte, 64<<10)
	var rerr error
	for {
		k, err := c.Read(buf)
		if off := ctCheckPattern(buf[:k], recvOff+got); off >= 0 {
			rerr = fmt.Errorf("received bytes differ from the pattern at offset %d", off-recvOff)
			break
		}
		got += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			rerr = fmt.Errorf("read after %d bytes: %w", got, err)
			break
		}
	}
	if rerr == nil && got != n {
		rerr = fmt.Errorf("received %d bytes, want %d", got, n)
	}
	return errors.Join(rerr, <-werr)
}

// TestNetConnTLS runs crypto/tls over the adapters: tls.NewListener on a
// NetListener, tls.Client on a DialNet connection, 4 MiB each way, TLS 1.2
// and 1.3.
func TestNetConnTLS(t *testing.T) {
	const size = 4 << 20
	cert, pool := npCert(t)
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			t.Run(tls.VersionName(v), func(t *testing.T) {
				ln := npListen(t, g)
				tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: v, MaxVersion: v})
				srvErr := make(chan error, 1)
				go func() {
					c, err := tln.Accept()
					if err != nil {
						srvErr <- err
						return
					}
					defer c.Close()
					tc := c.(*tls.Conn)
					if _, ok := tc.NetConn().(*conn.NetConn); !ok {
						srvErr <- fmt.Errorf("server: tls over %T", tc.NetConn())
						return
					}
					tc.SetDeadline(time.Now().Add(20 * time.Second))
					if err := tc.Handshake(); err != nil {
						srvErr <- fmt.Errorf("server handshake: %w", err)
						return
					}
					srvErr <- npExchange(tc, tc.CloseWrite, size, 1<<30, 0)
				}()

				nc, err := conn.DialNet(context.Background(), g, "tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				tc := tls.Client(nc, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: v, MaxVersion: v})
				defer tc.Close()
				tc.SetDeadline(time.Now().Add(20 * time.Second))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := tc.HandshakeContext(ctx); err != nil {
					t.Fatalf("client handshake: %v", err)
				}
				if st := tc.ConnectionState(); st.Version != v || len(st.PeerCertificates) != 1 {
					t.Errorf("negotiated %s with %d peer certificates", tls.VersionName(st.Version), len(st.PeerCertificates))
				}
				if err := npExchange(tc, tc.CloseWrite, size, 0, 1<<30); err != nil {
					t.Errorf("client: %v", err)
				}
				select {
				case err := <-srvErr:
					if err != nil {
						t.Errorf("server: %v", err)
					}
				case <-time.After(20 * time.Second):
					t.Fatal("the server side did not finish within 20s")
				}
			})
		}
	})
}

// TestNetConnHTTP2 serves HTTP/2 over TLS on a NetListener, both with
// ServeTLS and with Serve on a tls.NewListener, to a Transport dialing
// with DialNet: every request is HTTP/2, on one connection, bodies intact.
func TestNetConnHTTP2(t *testing.T) {
	cert, pool := npCert(t)
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		for _, mode := range []string{"ServeTLS", "TLSListener"} {
			t.Run(mode, func(t *testing.T) {
				srv := &http.Server{
					Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.ProtoMajor != 2 || r.TLS == nil || r.TLS.NegotiatedProtocol != "h2" {
							t.Errorf("server: request %s over TLS %v", r.Proto, r.TLS != nil)
						}
						sum, n, err := npHashReader(r.Body)
						if err != nil {
							http.Error(w, err.Error(), 500)
							return
						}
						w.Header().Set("X-Sha256", hex.EncodeToString(sum[:]))
						off, _ := strconv.ParseInt(r.URL.Query().Get("off"), 10, 64)
						io.CopyBuffer(w, &ctPatternReader{off: off, n: n}, make([]byte, 32<<10))
					}),
					TLSConfig: &tls.Config{
						Certificates: []tls.Certificate{cert},
						NextProtos:   []string{"h2", "http/1.1"},
					},
				}
				if mode == "TLSListener" {
					srv.Protocols = new(http.Protocols)
					srv.Protocols.SetHTTP1(true)
					srv.Protocols.SetHTTP2(true)
				}
				hs := npServeHTTP(t, g, srv, mode)
				var dials atomic.Int32
				tr := npTransport(t, g, &dials)
				tr.ForceAttemptHTTP2 = true
				tr.TLSClientConfig = &tls.Config{RootCAs: pool}
				client := &http.Client{Transport: tr, Timeout: 20 * time.Second}

				do := func(i int) error {
					size := int64(1+i) * 37 << 10
					off := int64(i) << 24
					req, err := http.NewRequest("POST", fmt.Sprintf("%s/?off=%d", hs.url, off), &ctPatternReader{off: off, n: size})
					if err != nil {
						return err
					}
					req.ContentLength = size
					resp, err := client.Do(req)
					if err != nil {
						return err
					}
					defer resp.Body.Close()
					if resp.ProtoMajor != 2 {
						return fmt.Errorf("request %d: response %s, want HTTP/2", i, resp.Proto)
					}
					sum, n, err := npHashReader(resp.Body)
					if err != nil {
						return fmt.Errorf("request %d: body: %w", i, err)
					}
					want := npSum(off, size)
					if n != size || sum != want || resp.Header.Get("X-Sha256") != hex.EncodeToString(want[:]) {
						return fmt.Errorf("request %d: got %d bytes %x (server hashed %s), want %d bytes %x",
							i, n, sum, resp.Header.Get("X-Sha256"), size, want)
					}
					return nil
				}
				// One request first, then concurrent ones multiplexed on
				// its connection.
				if err := do(0); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				errs := make(chan error, 16)
				for i := 1; i <= 16; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs <- do(i)
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						t.Error(err)
					}
				}
				if n := dials.Load(); n != 1 {
					t.Errorf("the client dialed %d times, want 1", n)
				}
				if n := hs.states.count(http.StateNew); n != 1 {
					t.Errorf("the server saw %d connections, want 1", n)
				}
			})
		}
	})
}

// TestNetConnProxyIOCopy relays a stream through a proxy made of io.Copy
// between NetConns (NetConn.WriteTo does the copying), passing half-closes
// on with CloseWrite, to an echo upstream that is itself io.Copy of a
// NetConn onto itself: the client gets its 256 MiB (64 MiB in short mode
// and under -race) back intact.
func TestNetConnProxyIOCopy(t *testing.T) {
	total := int64(256 << 20)
	if testing.Short() || accRace {
		total = 64 << 20
	}
	const budget = 45 * time.Second
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		deadline := time.Now().Add(budget)

		// The upstream: echoes, then half-closes when the proxy does.
		up := npListen(t, g)
		upDone := make(chan error, 1)
		var echoed int64
		go func() {
			c, err := up.Accept()
			if err != nil {
				upDone <- err
				return
			}
			defer c.Close()
			nc := c.(*conn.NetConn)
			nc.SetDeadline(deadline)
			echoed, err = io.Copy(nc, nc)
			if err == nil {
				err = nc.CloseWrite()
			}
			upDone <- err
		}()

		// The proxy.
		front := npListen(t, g)
		proxyDone := make(chan error, 1)
		var toUp, toClient int64
		go func() {
			c, err := front.Accept()
			if err != nil {
				proxyDone <- err
				return
			}
			client := c.(*conn.NetConn)
			defer client.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			server, err := conn.DialNet(ctx, g, "tcp", up.Addr().String())
			if err != nil {
				proxyDone <- err
				return
			}
			defer server.Close()
			client.SetDeadline(deadline)
			server.SetDeadline(deadline)
			pipe := func(dst, src *conn.NetConn, n *int64) error {
				k, err := io.Copy(dst, src)
				*n = k
				if err != nil {
					return err
				}
				return dst.CloseWrite()
			}
			e := make(chan error, 1)
			go func() { e <- pipe(server, client, &toUp) }()
			err = pipe(client, server, &toClient)
			proxyDone <- errors.Join(err, <-e)
		}()

		// The client: writes the pattern and half-closes, while reading
		// the echo until EOF; both hashed.
		start := time.Now()
		cc, err := conn.DialNet(context.Background(), g, "tcp", front.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		cc.SetDeadline(deadline)
		sent := make(chan [32]byte, 1)
		werr := make(chan error, 1)
		go func() {
			h := sha256.New()
			bw := bufio.NewWriterSize(io.MultiWriter(cc, h), 256<<10)
			_, err := io.CopyBuffer(bw, &ctPatternReader{n: total}, make([]byte, 256<<10))
			if err == nil {
				err = bw.Flush()
			}
			if err == nil {
				err = cc.CloseWrite()
			}
			var s [32]byte
			h.Sum(s[:0])
			sent <- s
			werr <- err
		}()
		gotSum, got, rerr := npHashReader(cc)
		if rerr != nil {
			t.Errorf("client read: %v after %d bytes", rerr, got)
		}
		var sentSum [32]byte
		select {
		case sentSum = <-sent:
			if err := <-werr; err != nil {
				t.Errorf("client write: %v", err)
			}
		case <-time.After(time.Until(deadline) + 5*time.Second):
			t.Fatal("the client's writer did not finish in time")
		}
		elapsed := time.Since(start)
		for name, ch := range map[string]chan error{"proxy": proxyDone, "upstream": upDone} {
			select {
			case err := <-ch:
				if err != nil {
					t.Errorf("%s: %v", name, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("the %s did not finish within 5s of the client", name)
			}
		}
		if got != total || gotSum != sentSum {
			t.Fatalf("echo through the proxy: %d bytes sha256 %x, sent %d bytes %x", got, gotSum, total, sentSum)
		}
		if toUp != total || toClient != total || echoed != total {
			t.Errorf("copied client→upstream %d, upstream echoed %d, upstream→client %d; want %d each", toUp, echoed, toClient, total)
		}
		t.Logf("%d MiB through the proxy and back in %v (%.0f MiB/s each way)",
			total>>20, elapsed.Round(time.Millisecond), float64(total>>20)/elapsed.Seconds())
	})
}
