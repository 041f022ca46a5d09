// Command ringecho is ringloop's side of the comparison: a loop.Group on the
// backend given by -backend (uring or epoll) and a conn server whose OnData
// writes back what it received.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"

	"github.com/ringloop/ringloop/bench/internal/serve"
)

type echo struct{ conn.NopHandler }

func (echo) OnData(c *conn.Conn, data []byte) { _, _ = c.Write(data) }

// dgramEcho sends each datagram back to its sender.
type dgramEcho struct{}

func (dgramEcho) OnPacket(pc *conn.PacketConn, data []byte, from conn.Addr) {
	_, _ = pc.WriteToAddr(data, from)
}

func main() {
	f := serve.Register()
	backend := flag.String("backend", "uring", "uring or epoll")
	loops := flag.Int("loops", 1, "event loops")
	stats := flag.Bool("stats", false, "print the loops' counters to stderr at exit")
	network := flag.String("network", "tcp", "tcp, or udp (echo each datagram to its sender)")
	flag.Parse()

	var b loop.Backend
	switch *backend {
	case "uring":
		b = loop.BackendUring
	case "epoll":
		b = loop.BackendEpoll
	default:
		serve.Fatal("backend", errBackend(*backend))
	}
	opts := []loop.Option{loop.WithLoops(*loops), loop.WithBackend(b), loop.WithName("ringecho")}
	if v := os.Getenv("RINGECHO_BLOCKED_THRESHOLD"); v != "" {
		// For the harness's detector on/off comparison
		// (-variant NAME=ringloop-uring:RINGECHO_BLOCKED_THRESHOLD=0).
		d, err := time.ParseDuration(v)
		if err != nil {
			serve.Fatal("RINGECHO_BLOCKED_THRESHOLD", err)
		}
		opts = append(opts, loop.WithBlockedThreshold(d))
	}
	if *network == "udp" {
		// Buffers for any UDP datagram over IPv4 (65,507 bytes), as
		// netecho reads into 64 KiB: the loop's default ones (4 KiB)
		// hold 3,968 bytes.
		opts = append(opts, loop.WithBufferRing(256, 65536+128))
	}
	g, err := loop.NewGroup(opts...)
	if err != nil {
		serve.Fatal("loop group", err)
	}
	if *network == "udp" {
		// The socket buffers are the load generator's.
		pc, err := conn.ListenPacket(context.Background(), g, "udp4", f.Addr, dgramEcho{},
			conn.WithReadBuffer(4<<20), conn.WithWriteBuffer(4<<20))
		if err != nil {
			serve.Fatal("listen", err)
		}
		stopProfile := f.StartProfile()
		serve.Ready(pc.LocalAddr().String())
		serve.Wait(f.MaxRuntime)
		stopProfile()
		if st := pc.Stats(); *stats || st.KernelDrops+st.Truncated+st.WriteErrors > 0 {
			fmt.Fprintf(os.Stderr, "datagrams %+v\n", st)
		}
		pc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		return
	}
	s, err := conn.Listen(context.Background(), g, "tcp", f.Addr, echo{})
	if err != nil {
		serve.Fatal("listen", err)
	}
	stopProfile := f.StartProfile()
	serve.Ready(s.Addr().String())
	serve.Wait(f.MaxRuntime)
	stopProfile()
	if *stats {
		t := g.Stats().Total
		fmt.Fprintf(os.Stderr, "turns %d sleeps %d wake-writes %d wakeups %d ops %d completions %d tasks %d\n",
			t.Turns, t.Sleeps, t.WakeWrites, t.Wakeups, t.OpsSubmitted, t.Completions, t.Tasks)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.Shutdown(ctx)
	_ = g.Shutdown(ctx)
}

type errBackend string

func (e errBackend) Error() string { return "unknown backend " + string(e) + " (uring or epoll)" }
