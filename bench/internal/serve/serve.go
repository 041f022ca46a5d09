// Package serve holds what the benchmark echo servers share: the readiness
// line the harness waits for and the bounded wait for a stop.
package serve

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"
)

// Flags are the command-line flags every echo server takes.
type Flags struct {
	Addr       string
	MaxRuntime time.Duration
	CPUProfile string
	MemProfile string
}

// Register adds -addr and -max-runtime to the default flag set.
func Register() *Flags {
	f := &Flags{}
	flag.StringVar(&f.Addr, "addr", "127.0.0.1:0", "listen address (port 0: any free port)")
	flag.DurationVar(&f.MaxRuntime, "max-runtime", time.Hour, "exit after this long whatever happens")
	flag.StringVar(&f.CPUProfile, "cpuprofile", "", "write a pprof CPU profile of the whole run to this file")
	flag.StringVar(&f.MemProfile, "memprofile", "", "write a pprof heap profile (every allocation sampled) to this file when the server is told to stop")
	return f
}

// StartProfile starts the CPU profile asked for by -cpuprofile and the
// heap sampling of -memprofile, if any, and returns the function that ends
// them (writing the heap profile).
func (f *Flags) StartProfile() func() {
	if f.MemProfile != "" {
		runtime.MemProfileRate = 1
		cpu := f.startCPU()
		return func() {
			cpu()
			out, err := os.Create(f.MemProfile)
			if err != nil {
				Fatal("memprofile", err)
			}
			runtime.GC()
			_ = pprof.WriteHeapProfile(out)
			out.Close()
		}
	}
	return f.startCPU()
}

func (f *Flags) startCPU() func() {
	if f.CPUProfile == "" {
		return func() {}
	}
	out, err := os.Create(f.CPUProfile)
	if err != nil {
		Fatal("cpuprofile", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		Fatal("cpuprofile", err)
	}
	return func() {
		pprof.StopCPUProfile()
		out.Close()
	}
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
