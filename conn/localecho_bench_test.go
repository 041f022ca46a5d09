package conn_test

import (
	"context"
	"fmt"
	"io"
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
		c.Loop().HandOffNextWait() // the benchmark goroutine is now runnable
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
	accRoundTrips(b, conns, size, func(i int, msg, _ []byte) error {
		if _, err := clients[i].Write(msg); err != nil {
			return err
		}
		if _, ok := <-hs[i].done; !ok {
			return io.ErrUnexpectedEOF
		}
		return nil
	})
}
