package conn_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// BenchmarkLocalEcho measures round trips when both ends live in this
// process: conn.Dial clients against a conn.Listen echo server on the same
// group, next to net clients against a net server. Every hand-off between
// a client goroutine and a loop is in the measurement, which the bench/
// harness (clients in another process) does not see. Run it with -cpu
// 1,2,4 to vary GOMAXPROCS.
func BenchmarkLocalEcho(b *testing.B) {
	for _, backend := range []string{"uring", "epoll", "net"} {
		for _, conns := range []int{1, 64} {
			b.Run(fmt.Sprintf("backend=%s/conns=%d/size=64", backend, conns), func(b *testing.B) {
				if backend == "net" {
					accBenchEcho(b, "net", conns, 64)
					return
				}
				localEcho(b, backend, conns, 64)
			})
		}
	}
}

// replies is a client handler that hands each complete reply to the
// waiting benchmark goroutine.
type replies struct {
	conn.NopHandler
	size int
	got  int
	done chan struct{}
}

func (r *replies) OnData(c *conn.Conn, data []byte) {
	r.got += len(data)
	for r.got >= r.size {
		r.got -= r.size
		r.done <- struct{}{}
	}
}

func localEcho(b *testing.B, backend string, conns, size int) {
	lb := loop.BackendEpoll
	if backend == "uring" {
		testutil.SkipIfNoUring(b)
		lb = loop.BackendUring
	}
	g := accGroup(b, lb)
	addr := accListen(b, g, accEcho{}).Addr().String()
	clients := make([]*conn.Conn, conns)
	hs := make([]*replies, conns)
	for i := range clients {
		hs[i] = &replies{size: size, done: make(chan struct{}, 1)}
		c, err := conn.Dial(context.Background(), g, "tcp", addr, hs[i])
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := make([]byte, size)
			for next.Add(1) <= int64(b.N) {
				if _, err := c.Write(msg); err != nil {
					errs <- err
					return
				}
				if _, ok := <-hs[i].done; !ok {
					errs <- io.ErrUnexpectedEOF
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
