// Command uringecho is an echo server on ringloop: every byte a client sends
// comes back to it. Run it with
//
//	go run ./cmd/uringecho
//
// and talk to it with nc 127.0.0.1 7777. See -h for the flags.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// exitBudget bounds the shutdown after SIGINT/SIGTERM (connections get half
// of it, the loops the rest), so the process is gone within one second.
const exitBudget = 800 * time.Millisecond

func main() {
	cfg := parseFlags(os.Args[1:])
	// Loops name their OS threads "<name>-<group>-<index>"; one of them may
	// be the main thread, which names the process in ps, top and pgrep.
	opts := []loop.Option{loop.WithName("uringecho"), loop.WithLoops(cfg.loops),
		loop.WithBackend(cfg.backend), loop.WithIORatio(cfg.ioRatio)}
	g, err := loop.NewGroup(opts...)
	if err != nil {
		fatalf("loops: %v", err)
	}
	if cfg.debugAddr != "" {
		ln, url, err := serveDebug(cfg.debugAddr)
		if err != nil {
			g.Shutdown(context.Background())
			fatalf("debug: %v", err)
		}
		defer ln.Close()
		cfg.debugURL = url
	}
	if cfg.network == "udp" {
		serveUDP(cfg, g)
		return
	}
	h := newEcho(g.Len())
	// A client that sends and never reads stalls in its own socket: reading
	// pauses while its echo is above the high-water mark.
	srv, err := conn.Listen(context.Background(), g, "tcp", cfg.addr, h,
		conn.WithReusePort(cfg.reusePort), conn.WithPauseReadWhenUnwritable(true))
	if err != nil {
		g.Shutdown(context.Background())
		fatalf("listen: %v", err)
	}
	printBanner(os.Stdout, cfg, srv.Addr(), g)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.stats > 0 {
		go reportStats(ctx, os.Stdout, cfg.stats, srv, g, h)
	}
	<-ctx.Done()
	stop() // a second signal now kills the process the default way

	deadline, cancel := context.WithTimeout(context.Background(), exitBudget)
	defer cancel()
	connCtx, connCancel := context.WithTimeout(deadline, exitBudget/2)
	defer connCancel()
	errConns := srv.Shutdown(connCtx) // stop accepting, close every connection
	errLoops := g.Shutdown(deadline)  // run what is queued, reap every op
	fmt.Printf("uringecho: shut down: %d bytes echoed (conns: %s, loops: %s)\n", h.total(), orOK(errConns), orOK(errLoops))
	if errConns != nil || errLoops != nil {
		os.Exit(1)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "uringecho: "+format+"\n", args...)
	os.Exit(1)
}

// serveUDP runs the datagram echo until SIGINT or SIGTERM.
func serveUDP(cfg config, g *loop.Group) {
	h := &dgramEcho{}
	pcs, err := listenUDP(cfg, g, h)
	if err != nil {
		g.Shutdown(context.Background())
		fatalf("listen: %v", err)
	}
	printBanner(os.Stdout, cfg, udpAddr(pcs), g)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.stats > 0 {
		go reportUDPStats(ctx, os.Stdout, cfg.stats, pcs, g, h)
	}
	<-ctx.Done()
	stop()
	deadline, cancel := context.WithTimeout(context.Background(), exitBudget)
	defer cancel()
	for _, pc := range pcs {
		pc.Close()
	}
	errLoops := g.Shutdown(deadline)
	fmt.Printf("uringecho: shut down: %d datagrams, %d bytes echoed (loops: %s)\n", h.dgrams.Load(), h.bytes.Load(), orOK(errLoops))
	if errLoops != nil {
		os.Exit(1)
	}
}
