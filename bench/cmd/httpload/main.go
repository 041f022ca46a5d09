// Command httpload is the HTTP workload's load generator: -conns keep-alive
// HTTP/1.1 connections, each sending GET / and reading the response before
// the next, for -duration. Every response is checked (status 200, the
// expected body); one wrong byte fails the run. It prints one line:
// requests, requests per second, p50 and p99 latency in microseconds; with
// -json it speaks the harness's protocol instead (PHASE measure, PHASE
// done, RESULT {json}), like cmd/loadgen.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "server address")
	conns := flag.Int("conns", 64, "connections")
	duration := flag.Duration("duration", 5*time.Second, "measured time")
	warmup := flag.Duration("warmup", time.Second, "unmeasured time first")
	want := flag.String("body", "Hello, World!", "expected response body")
	jsonOut := flag.Bool("json", false, "harness protocol: PHASE lines and a RESULT line of JSON")
	flag.Int("size", 0, "ignored (the echo load generator's flag)")
	flag.Int("depth", 1, "ignored: one request in flight per connection")
	flag.Uint64("requests", 0, "ignored")
	flag.Parse()

	req := []byte("GET / HTTP/1.1\r\nHost: " + *addr + "\r\nUser-Agent: httpload\r\n\r\n")
	var measuring, stop atomic.Bool
	var failed atomic.Value
	var wg sync.WaitGroup
	lat := make([][]time.Duration, *conns)
	counts := make([]int, *conns)
	for i := range *conns {
		c, err := net.Dial("tcp", *addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			os.Exit(1)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			r := bufio.NewReaderSize(c, 4096)
			for !stop.Load() {
				start := time.Now()
				if _, err := c.Write(req); err != nil {
					failed.Store(err)
					return
				}
				if err := readResponse(r, []byte(*want)); err != nil {
					failed.Store(err)
					return
				}
				if measuring.Load() {
					lat[i] = append(lat[i], time.Since(start))
					counts[i]++
				}
			}
		}()
	}
	time.Sleep(*warmup)
	if *jsonOut {
		fmt.Println("PHASE measure")
	}
	cpu0 := cpuSeconds()
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(*duration)
	measuring.Store(false)
	el := time.Since(t0)
	cpu := cpuSeconds() - cpu0
	if *jsonOut {
		fmt.Println("PHASE done")
	}
	stop.Store(true)
	wg.Wait()
	var firstErr string
	if err, _ := failed.Load().(error); err != nil {
		firstErr = err.Error()
		if !*jsonOut {
			fmt.Fprintln(os.Stderr, "httpload: a response failed the check:", err)
			os.Exit(1)
		}
	}
	var all []time.Duration
	n := 0
	for i := range lat {
		all = append(all, lat[i]...)
		n += counts[i]
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(p*float64(len(all)-1))].Microseconds())
	}
	if *jsonOut {
		var errs uint64
		if firstErr != "" {
			errs = 1
		}
		b, _ := json.Marshal(map[string]any{
			"elapsed_s": el.Seconds(), "requests": n, "rps": float64(n) / el.Seconds(), "mbps": 0.0,
			"p50_ns": uint64(pct(0.50) * 1e3), "p99_ns": uint64(pct(0.99) * 1e3), "p999_ns": uint64(pct(0.999) * 1e3),
			"max_ns": uint64(pct(1) * 1e3), "errors": errs, "first_error": firstErr, "client_cpu_s": cpu,
		})
		fmt.Printf("RESULT %s\n", b)
		if firstErr != "" {
			os.Exit(1)
		}
		return
	}
	fmt.Printf("requests %d req/s %.0f p50_us %.0f p99_us %.0f\n", n, float64(n)/el.Seconds(), pct(0.50), pct(0.99))
}

// cpuSeconds is the process's user and system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// readResponse reads one response and checks its status and body.
func readResponse(r *bufio.Reader, want []byte) error {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return fmt.Errorf("status line %q", line)
	}
	length := -1
	for {
		h, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(h) <= 2 {
			break
		}
		if k := bytes.IndexByte(h, ':'); k > 0 && bytes.EqualFold(h[:k], []byte("Content-Length")) {
			length, err = strconv.Atoi(string(bytes.TrimSpace(h[k+1:])))
			if err != nil {
				return fmt.Errorf("content-length %q", h)
			}
		}
	}
	if length != len(want) {
		return fmt.Errorf("content-length %d, want %d", length, len(want))
	}
	b := make([]byte, length)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	if !bytes.Equal(b, want) {
		return fmt.Errorf("body %q", b)
	}
	return nil
}
