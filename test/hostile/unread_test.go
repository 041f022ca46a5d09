package hostile

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// HTTP clients that never read: thousands of requests for 1 MiB whose
// responses are never read, and thousands of 96 KiB request bodies that
// the handler never reads. Over package net what the peers refuse to read,
// or the handler to take, waits in the kernel's socket buffers; over
// conn.ListenNet the adapter holds part of it in the process (a NetConn's
// outbound queue up to its high-water mark, its inbound buffer up to its
// inbound bound, both counted in the loop's budgets). The server's peak
// resident set over its baseline must stay within 1.5 times package net's
// with the same handler, on both backends, locked and shared thread; a
// canary client in another process gets its answers meanwhile, at a p99
// at most twice package net's.

// atkBig is the 1 MiB answer to GET /big.
var atkBig = bytes.Repeat([]byte("b"), 1<<20)

// atkUnreadHandler answers GET /big with 1 MiB, POST /upload by waiting,
// its body unread, until release closes, and anything else with "ok".
type atkUnreadHandler struct {
	entered atomic.Int64 // /big and /upload requests that reached the handler
	release chan struct{}
}

func (h *atkUnreadHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/big":
		h.entered.Add(1)
		w.Header().Set("Content-Length", strconv.Itoa(len(atkBig)))
		atkWriteBig(w)
	case "/upload":
		h.entered.Add(1)
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
	default:
		w.Write([]byte("ok"))
	}
}

// atkWriteBig writes the 1 MiB answer: a frame of its own, so that the
// stacks of handlers blocked in it can be counted.
func atkWriteBig(w http.ResponseWriter) { w.Write(atkBig) }

// atkServeUnread serves h over ln and returns a function that stops the
// server and waits for its connections to end.
func atkServeUnread(ln net.Listener, h http.Handler) func() {
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	return func() { srv.Close(); <-done }
}

// atkUnreadRun serves atkUnreadHandler on the target, starts a canary, runs
// attack (which returns once the attack is in place, and a function that
// ends it), and checks the peak RSS and the canary against package net's.
func atkUnreadRun(t *testing.T, test string, tg atkTarget, g *loop.Group, figs *atkFigures, attack func(addr string, h *atkUnreadHandler, diag func() string) func()) {
	t.Helper()
	h := &atkUnreadHandler{release: make(chan struct{})}
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
	stop := atkServeUnread(ln, h)
	defer stop()
	port := atkPort(ln.Addr())
	canary := atkStartCanary(t, test, "http", ln.Addr())
	baseFds := atkPortFds(port)
	w := watchMem(t)
	start := time.Now()
	diag := func() string {
		if srv == nil {
			return ""
		}
		st := srv.Stats()
		return fmt.Sprintf("; server: %d accepted, %d open, accepts paused for overload %d times, %d waiting in the accept queue", st.Accepted, st.Active, st.Overloads, st.Backlog)
	}
	end := attack(ln.Addr().String(), h, diag)
	inPlace := time.Since(start)
	// The attack is in place: it holds for a while, for the memory to be
	// sampled at its peak and the canary to make a few hundred round
	// trips against it.
	time.Sleep(atkHold)
	s := w.sampled()
	testutil.WaitFor(t, 10*time.Second, "two more memory samples", func() bool { return w.sampled() >= s+2 })
	heap, rss := w.end()
	res := canary.end()
	close(h.release)
	end()
	left := -1
	released := testutil.Eventually(atkVanishBound, func() bool {
		left = atkPortFds(port) - baseFds
		return left <= 0 && (srv == nil || srv.Conns() == 0)
	})
	t.Logf("%s: the attack in place after %v; %d handlers entered; when it ended, %d fds of the server's port left%s", tg, inPlace.Round(time.Millisecond), h.entered.Load(), left, diag())
	if !released {
		t.Errorf("%d fds of the server's port still open %v after the peers closed", left, atkVanishBound)
	}
	atkCheckCanary(t, tg, figs, "p99", res)
	atkCheckMem(t, tg, figs, "rss", heap, rss, 0, false)
}

// atkHold is how long an attack holds once in place.
const atkHold = 2 * time.Second

// atkUnreadBound bounds the wait for an attack to be in place: every
// request in its handler, every peer's bytes written.
const atkUnreadBound = 120 * time.Second

// TestHTTPUnreadResponsesBounded: clients request 1 MiB each and never
// read the response. Each handler blocks in its Write once the peer's
// socket is full: over package net the answer waits in the handler's
// slice and the kernel's buffers, over the adapter a NetConn also queues
// up to its high-water mark. The peak RSS over the adapter is at most 1.5
// times package net's, with the shared thread and the locked one, on both
// backends.
func TestHTTPUnreadResponsesBounded(t *testing.T) {
	atkCanaryChild()
	n := scale(5000, 500)
	atkNeedFds(t, 2*n+64)
	figs := new(atkFigures)
	atkRun(t, atkTargets(true, true), func(t *testing.T, tg atkTarget, g *loop.Group) {
		atkUnreadRun(t, "TestHTTPUnreadResponsesBounded", tg, g, figs, func(addr string, h *atkUnreadHandler, diag func() string) func() {
			req := []byte("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
			peers := atkDialAll(t, &net.Dialer{Control: atkSlowReader}, addr, n, func(_ int, nc net.Conn) error {
				_, err := nc.Write(req)
				return err
			})
			end := func() {
				for _, nc := range peers {
					nc.Close()
				}
			}
			ok := testutil.Eventually(atkUnreadBound, func() bool { return h.entered.Load() == int64(n) })
			// Every handler blocked in its Write: its answer is as far as
			// it goes. Counting them walks every goroutine's stack, so
			// the poll is slow.
			blocked := 0
			ok = ok && testutil.Eventually(atkUnreadBound, func() bool {
				time.Sleep(100 * time.Millisecond)
				blocked = testutil.Parked("hostile.atkWriteBig")
				return blocked == n
			})
			if !ok {
				end()
				t.Fatalf("the attack not in place after %v: %d of %d requests in their handler, %d blocked writing%s", atkUnreadBound, h.entered.Load(), n, blocked, diag())
			}
			return end
		})
	})
}

// TestHTTPUnreadBodiesBounded: clients send 96 KiB request bodies that the
// handler never reads (it waits until the attack ends). Over package net
// the bodies wait in the kernel's buffers; over the adapter a NetConn
// receives up to its inbound bound (64 KiB) before it pauses, and its
// loop's budget of kept bytes pauses the stalled ones sooner. The peak RSS
// over the adapter is at most 1.5 times package net's, with the shared
// thread and the locked one, on both backends.
func TestHTTPUnreadBodiesBounded(t *testing.T) {
	atkCanaryChild()
	n := scale(6000, 600)
	atkNeedFds(t, 2*n+64)
	const bodyLen = 96 << 10
	req := append([]byte("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: "+strconv.Itoa(bodyLen)+"\r\n\r\n"), bytes.Repeat([]byte("u"), bodyLen)...)
	figs := new(atkFigures)
	atkRun(t, atkTargets(true, true), func(t *testing.T, tg atkTarget, g *loop.Group) {
		atkUnreadRun(t, "TestHTTPUnreadBodiesBounded", tg, g, figs, func(addr string, h *atkUnreadHandler, diag func() string) func() {
			peers := atkDialAll(t, &net.Dialer{}, addr, n, nil)
			end := func() {
				for _, nc := range peers {
					nc.Close()
				}
			}
			// Each peer writes its request and body; a write the server's
			// buffers and the peer's own cannot hold stalls until the
			// deadline.
			var wg sync.WaitGroup
			var stalled atomic.Int64
			deadline := time.Now().Add(atkUnreadBound)
			for _, nc := range peers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					nc.SetWriteDeadline(deadline)
					if _, err := nc.Write(req); err != nil {
						stalled.Add(1)
					}
				}()
			}
			ok := testutil.Eventually(atkUnreadBound, func() bool { return h.entered.Load() == int64(n) })
			wg.Wait()
			if !ok || stalled.Load() > 0 {
				end()
				t.Fatalf("the attack not in place: %d of %d requests in their handler, %d peers could not write their body%s", h.entered.Load(), n, stalled.Load(), diag())
			}
			return end
		})
	})
}
