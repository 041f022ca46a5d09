// Package serve holds what the benchmark echo servers share: the readiness
// line the harness waits for and the bounded wait for a stop.
package serve

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Flags are the command-line flags every echo server takes.
type Flags struct {
	Addr       string
	MaxRuntime time.Duration
}

// Register adds -addr and -max-runtime to the default flag set.
func Register() *Flags {
	f := &Flags{}
	flag.StringVar(&f.Addr, "addr", "127.0.0.1:0", "listen address (port 0: any free port)")
	flag.DurationVar(&f.MaxRuntime, "max-runtime", time.Hour, "exit after this long whatever happens")
	return f
}

// Ready prints the line the harness waits for: "LISTEN host:port".
func Ready(addr string) {
	fmt.Fprintf(os.Stdout, "LISTEN %s\n", addr)
}

// Wait blocks until SIGINT or SIGTERM arrives or maxRuntime has passed, and
// reports which.
func Wait(maxRuntime time.Duration) string {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	t := time.NewTimer(maxRuntime)
	defer t.Stop()
	select {
	case s := <-ch:
		return s.String()
	case <-t.C:
		return "max runtime"
	}
}

// Fatal prints err and exits with status 1.
func Fatal(what string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	os.Exit(1)
}

// ParseFlags parses the default flag set.
func ParseFlags() { flag.Parse() }
