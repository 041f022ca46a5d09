//go:build linux

package bench_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"

	"github.com/ringloop/ringloop/bench/internal/loadgen"
)

type echoHandler struct{ conn.NopHandler }

func (echoHandler) OnData(c *conn.Conn, data []byte) { _, _ = c.Write(data) }

// startRingloop starts an in-process ringloop echo server on one loop.
func startRingloop(tb testing.TB, b loop.Backend) string {
	g, err := loop.NewGroup(loop.WithLoops(1), loop.WithBackend(b))
	if err != nil {
		tb.Skipf("backend unavailable: %v", err)
	}
	s, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", echoHandler{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		_ = g.Shutdown(ctx)
	})
	return s.Addr().String()
}

// startNet starts an in-process goroutine-per-connection echo server.
func startNet(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 16384)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// BenchmarkEcho runs the load generator in process against each server:
// ns/op is the measured time per echoed message over all connections. Server
// and client share the process and its CPUs, so use it to compare a change
// against its parent with benchstat; the harness (cmd/harness) is the
// side-by-side comparison with pinned CPUs.
func BenchmarkEcho(b *testing.B) {
	impls := []struct {
		name  string
		start func(testing.TB) string
	}{
		{"uring", func(tb testing.TB) string { return startRingloop(tb, loop.BackendUring) }},
		{"epoll", func(tb testing.TB) string { return startRingloop(tb, loop.BackendEpoll) }},
		{"net", startNet},
	}
	for _, impl := range impls {
		for _, conns := range []int{1, 64} {
			for _, size := range []int{64, 4096} {
				b.Run(fmt.Sprintf("impl=%s/conns=%d/size=%d", impl.name, conns, size), func(b *testing.B) {
					addr := impl.start(b)
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.ResetTimer()
					res, err := loadgen.Run(loadgen.Config{Addr: addr, Conns: conns, Size: size, Depth: 1,
						Duration: time.Minute, Requests: uint64(b.N)})
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
					if res.Errors > 0 {
						b.Fatalf("%d errors: %s", res.Errors, res.FirstError)
					}
					if res.Requests > 0 {
						b.ReportMetric(res.Elapsed*1e9/float64(res.Requests), "ns/op")
						b.ReportMetric(float64(res.P99)/1e3, "p99-µs")
					}
				})
			}
		}
	}
}
