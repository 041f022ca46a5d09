package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// config holds the command line.
type config struct {
	addr      string
	network   string
	loops     int
	backend   loop.Backend
	ioRatio   int
	reusePort bool
	stats     time.Duration
	debugAddr string
	debugURL  string // the debug server's base URL, once it listens
}

const description = `uringecho is an echo server running on ringloop event loops: each loop is a
goroutine locked to one OS thread (or a shared one, with RINGLOOP=thread=shared)
that owns one io_uring ring (or one epoll instance with -backend epoll). Connections are accepted on one loop and handed
round robin to the loops of the group (or, with -reuseport, accepted by every
loop on its own SO_REUSEPORT listener), and every byte a client sends is
written back to it. With -network udp it echoes each datagram to its sender
instead, from one UDP socket (one per loop with -reuseport). The banner names the backend, the kernel features in use
and the bound address; -stats prints a line of counters at each interval.
SIGINT or SIGTERM closes every connection and stops the loops within a second.`

// parseFlags parses args into a config; on error or -h it prints the usage
// and exits (status 2, or 0 for -h), like the flag package.
func parseFlags(args []string) config {
	fs := flag.NewFlagSet("uringecho", flag.ExitOnError)
	var cfg config
	backend := "auto"
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:7777", "`address` to listen on; port 0 picks a free port (the banner shows it)")
	fs.StringVar(&cfg.network, "network", "tcp", "`network`: tcp (echo streams) or udp (echo each datagram to its sender)")
	fs.IntVar(&cfg.loops, "loops", 0, "number of event `loops`; 0 means GOMAXPROCS")
	fs.StringVar(&backend, "backend", backend, "I/O `backend`: uring, epoll, or auto (io_uring from Linux 6.1, epoll before or where io_uring is unusable)")
	fs.IntVar(&cfg.ioRatio, "ioratio", loop.DefaultIORatio, "`percent` of loop time given to I/O versus tasks, 1..100 (100: run every task each turn)")
	fs.BoolVar(&cfg.reusePort, "reuseport", false, "one SO_REUSEPORT listener per loop instead of one acceptor handing connections out")
	fs.DurationVar(&cfg.stats, "stats", 0, "print connection and loop counters every `interval` (e.g. 1s); 0 disables")
	fs.StringVar(&cfg.debugAddr, "debug-addr", "", "serve /debug/pprof/, /debug/vars and /metrics (Prometheus) on this `address` (e.g. 127.0.0.1:6060); empty disables")
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: uringecho [flags]\n\n%s\n\nFlags:\n", description)
		fs.PrintDefaults()
		fmt.Fprintf(out, "\nExample:\n  go run ./cmd/uringecho -loops 2 -stats 1s\n  nc 127.0.0.1 7777\n  go run ./cmd/uringecho -network udp\n  nc -u 127.0.0.1 7777\n")
	}
	fs.Parse(args)
	if fs.NArg() > 0 {
		usageError(fs, "unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	switch backend {
	case "auto":
		cfg.backend = loop.BackendAuto
	case "uring":
		cfg.backend = loop.BackendUring
	case "epoll":
		cfg.backend = loop.BackendEpoll
	default:
		usageError(fs, "-backend %q: want uring, epoll or auto", backend)
	}
	if cfg.network != "tcp" && cfg.network != "udp" {
		usageError(fs, "-network %q: want tcp or udp", cfg.network)
	}
	if cfg.loops < 0 {
		usageError(fs, "-loops %d: want 0 (GOMAXPROCS) or more", cfg.loops)
	}
	if cfg.ioRatio < 1 || cfg.ioRatio > 100 {
		usageError(fs, "-ioratio %d: want 1..100", cfg.ioRatio)
	}
	if cfg.stats < 0 {
		usageError(fs, "-stats %v: want a positive interval, or 0 to disable", cfg.stats)
	}
	return cfg
}

func usageError(fs *flag.FlagSet, format string, args ...any) {
	fmt.Fprintf(fs.Output(), "uringecho: "+format+"\n", args...)
	fs.Usage()
	os.Exit(2)
}
