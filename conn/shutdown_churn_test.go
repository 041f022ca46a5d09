package conn_test

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// churnCounter echoes and counts each connection's OnClose calls.
type churnCounter struct {
	conn.NopHandler
	mu     sync.Mutex
	closes map[*conn.Conn]int
	opens  int
}

func (h *churnCounter) OnOpen(c *conn.Conn) {
	h.mu.Lock()
	h.opens++
	h.closes[c] += 0
	h.mu.Unlock()
}

func (h *churnCounter) OnData(c *conn.Conn, data []byte) { c.Write(data) }

func (h *churnCounter) OnClose(c *conn.Conn, err error) {
	h.mu.Lock()
	h.closes[c]++
	h.mu.Unlock()
}

// openFDs counts the process's open file descriptors.
func openFDs(tb testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	return len(ents)
}

// TestShutdownUnderChurn: an echo server under connect/write/close/reset
// churn is shut down mid-traffic: by Group.Shutdown alone, by
// Server.Shutdown then Group.Shutdown, or by both at once. Every connection
// that opened gets OnClose exactly once, the server ends with no
// connection, and no fd stays open. 20 runs per backend (5 in short mode
// and under -race), the orders taking turns.
func TestShutdownUnderChurn(t *testing.T) {
	runs := 20
	if testing.Short() || accRace {
		runs = 5
	}
	orders := []string{"group", "server-then-group", "concurrent"}
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		baseline := openFDs(t)
		for run := range runs {
			order := orders[run%len(orders)]
			g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(2), loop.WithLogger(ctLogger))
			if err != nil {
				t.Fatal(err)
			}
			h := &churnCounter{closes: map[*conn.Conn]int{}}
			srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", h)
			if err != nil {
				t.Fatal(err)
			}
			addr := srv.Addr().String()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var dials atomic.Int64
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(run), uint64(w)))
					buf := make([]byte, 4096)
					for {
						select {
						case <-stop:
							return
						default:
						}
						c, err := net.DialTimeout("tcp", addr, time.Second)
						if err != nil {
							continue // refused once the listener closed
						}
						dials.Add(1)
						c.SetDeadline(time.Now().Add(time.Second))
						c.Write(buf[:1+rng.IntN(len(buf))])
						switch rng.IntN(4) {
						case 0: // read some, then close
							c.Read(buf)
						case 1: // reset
							c.(*net.TCPConn).SetLinger(0)
						case 2: // half-close, then close
							c.(*net.TCPConn).CloseWrite()
							c.Read(buf)
						}
						c.Close()
					}
				}()
			}
			// The shutdown comes after a random number of dials, with
			// connections opening and closing around it.
			target := int64(50 + rand.IntN(400))
			ctWaitFor(t, 30*time.Second, "the dials before the shutdown", func() bool { return dials.Load() >= target })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var gerr, serr error
			switch order {
			case "group":
				gerr = g.Shutdown(ctx)
			case "server-then-group":
				serr = srv.Shutdown(ctx)
				gerr = g.Shutdown(ctx)
			case "concurrent":
				var sw sync.WaitGroup
				sw.Add(1)
				go func() { defer sw.Done(); serr = srv.Shutdown(ctx) }()
				gerr = g.Shutdown(ctx)
				sw.Wait()
			}
			cancel()
			close(stop)
			wg.Wait()
			srv.Close()
			if gerr != nil {
				t.Fatalf("run %d (%s): Group.Shutdown: %v", run, order, gerr)
			}
			if serr != nil {
				t.Logf("run %d (%s): Server.Shutdown: %v", run, order, serr)
			}
			h.mu.Lock()
			leaked, twice := 0, 0
			for _, n := range h.closes {
				switch {
				case n == 0:
					leaked++
				case n > 1:
					twice++
				}
			}
			opens := h.opens
			h.mu.Unlock()
			if leaked > 0 || twice > 0 {
				t.Fatalf("run %d (%s): of %d connections, %d never got OnClose, %d got it more than once",
					run, order, opens, leaked, twice)
			}
			if n := srv.Conns(); n != 0 {
				t.Fatalf("run %d (%s): Server.Conns() = %d after the shutdown", run, order, n)
			}
			ctWaitFor(t, 5*time.Second, "the fds to return to the baseline", func() bool { return openFDs(t) <= baseline })
			if run == 0 || run == runs-1 {
				t.Logf("run %d (%s): %d dials, %d connections opened and closed", run, order, dials.Load(), opens)
			}
		}
	})
}
