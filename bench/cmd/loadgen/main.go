//go:build linux

// Command loadgen drives an echo server and verifies every byte it gets
// back. See package internal/loadgen for how it works.
//
//	loadgen -addr 127.0.0.1:7000 -conns 64 -size 512 -depth 1 -warmup 1s -duration 5s
//
// With -json it prints "PHASE measure" and "PHASE done" lines when the
// measured window starts and ends (the harness samples the server's CPU and
// memory at those points) and a final "RESULT {json}" line; otherwise a
// human-readable summary.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/ringloop/ringloop/bench/internal/loadgen"
)

func main() {
	var cfg loadgen.Config
	flag.StringVar(&cfg.Addr, "addr", "127.0.0.1:7000", "server address (IPv4 host:port)")
	flag.IntVar(&cfg.Conns, "conns", 16, "connections")
	flag.IntVar(&cfg.Size, "size", 64, "message size in bytes")
	flag.IntVar(&cfg.Depth, "depth", 1, "outstanding messages per connection (pipelining depth)")
	flag.IntVar(&cfg.Threads, "threads", 1, "client event-loop threads")
	flag.DurationVar(&cfg.Warmup, "warmup", time.Second, "warm-up before the measured window")
	flag.DurationVar(&cfg.Duration, "duration", 5*time.Second, "measured window (upper bound)")
	flag.Uint64Var(&cfg.Requests, "requests", 1e9, "measured requests (upper bound)")
	flag.DurationVar(&cfg.ConnectTimeout, "connect-timeout", 5*time.Second, "timeout of each connect")
	flag.BoolVar(&cfg.UDP, "udp", false, "UDP: each connection is a connected UDP socket (a peer), each message one datagram of -size bytes (at least 8)")
	asJSON := flag.Bool("json", false, "machine-readable output for the harness")
	cpuprofile := flag.String("cpuprofile", "", "write a pprof CPU profile of the run to this file")
	flag.Parse()

	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "cpuprofile:", err)
			os.Exit(1)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	if *asJSON {
		cfg.OnPhase = func(p string) {
			fmt.Fprintf(os.Stdout, "PHASE %s\n", p)
			if p == "done" {
				// Give the harness time to sample the server before the
				// connections close and their teardown costs server CPU.
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	if err := run(cfg, *asJSON); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(cfg loadgen.Config, asJSON bool) error {
	res, err := loadgen.Run(cfg)
	if err != nil {
		return err
	}
	if asJSON {
		b, _ := json.Marshal(res)
		fmt.Fprintf(os.Stdout, "RESULT %s\n", b)
		return nil
	}
	fmt.Printf("conns %d  size %d  depth %d  window %.2fs\n", res.Conns, res.Size, res.Depth, res.Elapsed)
	fmt.Printf("requests %d  %.0f req/s  %.1f MB/s  client CPU %.2fs\n", res.Requests, res.RPS, res.MBps, res.ClientCPU)
	fmt.Printf("latency p50 %s  p99 %s  p99.9 %s  max %s\n", dur(res.P50), dur(res.P99), dur(res.P999), dur(res.Max))
	fmt.Printf("errors %d %s\n", res.Errors, res.FirstError)
	if res.Errors > 0 {
		return fmt.Errorf("%d errors", res.Errors)
	}
	return nil
}

func dur(ns uint64) time.Duration { return time.Duration(ns).Round(time.Microsecond / 10) }
