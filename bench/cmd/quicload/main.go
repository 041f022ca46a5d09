// Command quicload is the QUIC workload's load generator: quic-go on
// package net's UDP sockets (one per connection; quic-go sends with GSO
// where the kernel has it), against cmd/quicserve.
//
//   - -mode rr (request/response): -conns connections, each with -depth
//     streams in flight. Every request is a new stream carrying -size bytes
//     and the end of the client's side; the response is the same bytes and
//     the end of the server's side. Every response is checked; its latency
//     runs from opening the stream to reading the end of the response.
//   - -mode bulk: -conns connections, each downloading on -depth streams
//     (1 by default) the endless pattern of package internal/quicwork,
//     every byte checked. A "request" is -size bytes received (so MB/s is
//     requests/s × size, as for the other workloads); there is no latency.
//
// After the measured window it asks the server, on a stream of each
// connection, whether quic-go sends that connection's packets with GSO,
// and reports the answer beside its own side's. It prints a summary, or
// with -json the harness's protocol (PHASE measure, PHASE done, RESULT
// {json}), like cmd/loadgen.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/ringloop/ringloop/bench/internal/hist"
	"github.com/ringloop/ringloop/bench/internal/quicwork"
)

// result mirrors the load generator's JSON (cmd/loadgen) with the GSO
// state of both sides added.
type result struct {
	Mode       string  `json:"mode"`
	Conns      int     `json:"conns"`
	Size       int     `json:"size"`
	Depth      int     `json:"depth"`
	Elapsed    float64 `json:"elapsed_s"`
	Requests   uint64  `json:"requests"`
	Bytes      uint64  `json:"bytes"` // received in the window
	RPS        float64 `json:"rps"`
	MBps       float64 `json:"mbps"` // 10^6 bytes/s, one direction (the responses)
	P50        uint64  `json:"p50_ns"`
	P99        uint64  `json:"p99_ns"`
	P999       uint64  `json:"p999_ns"`
	Max        uint64  `json:"max_ns"`
	Errors     uint64  `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	ClientCPU  float64 `json:"client_cpu_s"`
	ServerGSO  string  `json:"server_gso"` // "on", "off" or "on k/n" (connections)
	ClientGSO  string  `json:"client_gso"`
}

// worker is one stream loop's counters, each its own so that no two
// goroutines write one cache line. The lock keeps requests and bytes a
// consistent pair for the snapshots taken while the workers run.
type worker struct {
	mu       sync.Mutex
	requests uint64
	bytes    uint64
	lat      hist.Hist // recorded while measuring; read after the workers stop
	_        [64]byte
}

// add counts requests and bytes received.
func (w *worker) add(requests, bytes uint64) {
	w.mu.Lock()
	w.requests += requests
	w.bytes += bytes
	w.mu.Unlock()
}

// load returns the requests and bytes counted so far.
func (w *worker) load() (requests, bytes uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.requests, w.bytes
}

// runner is what a run's workers share.
type runner struct {
	size       int // rr: request and response bytes
	measuring  atomic.Bool
	stopping   atomic.Bool
	errOnce    sync.Once
	firstError error
}

// fail records the first error a worker meets before the run stops (after
// that, the connections closing under the workers is expected).
func (r *runner) fail(err error) {
	if r.stopping.Load() {
		return
	}
	r.errOnce.Do(func() { r.firstError = err })
}

// config is a run's flags.
type config struct {
	addr, mode       string
	conns, size      int
	depth            int
	warmup, duration time.Duration
	onPhase          func(phase string) // "measure" and "done", if set
}

func main() {
	var cfg config
	flag.StringVar(&cfg.addr, "addr", "127.0.0.1:4433", "server address (IPv4 host:port)")
	flag.StringVar(&cfg.mode, "mode", "rr", "rr (request/response) or bulk (download)")
	flag.IntVar(&cfg.conns, "conns", 4, "QUIC connections")
	flag.IntVar(&cfg.size, "size", 64, "rr: request and response bytes; bulk: the bytes counted as one request")
	flag.IntVar(&cfg.depth, "depth", 16, "rr: streams in flight per connection; bulk: download streams per connection")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured time first")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured window")
	jsonOut := flag.Bool("json", false, "harness protocol: PHASE lines and a RESULT line of JSON")
	flag.Uint64("requests", 0, "ignored: the window is bounded by -duration")
	flag.Parse()
	if *jsonOut {
		cfg.onPhase = func(phase string) {
			fmt.Printf("PHASE %s\n", phase)
			if phase == "done" {
				// Give the harness time to sample the server before the
				// connections close and their teardown costs server CPU.
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	res, err := measure(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "quicload:", err)
		os.Exit(1)
	}
	if *jsonOut {
		b, _ := json.Marshal(res)
		fmt.Printf("RESULT %s\n", b)
	} else {
		fmt.Printf("%s: %d conns × depth %d, size %d, window %.2fs\n", res.Mode, res.Conns, res.Depth, res.Size, res.Elapsed)
		fmt.Printf("requests %d  %.0f req/s  %.1f MB/s  client CPU %.2fs\n", res.Requests, res.RPS, res.MBps, res.ClientCPU)
		if res.Mode == "rr" {
			fmt.Printf("latency p50 %s  p99 %s  p99.9 %s  max %s\n", dur(res.P50), dur(res.P99), dur(res.P999), dur(res.Max))
		}
		fmt.Printf("GSO: server %s, client %s\n", res.ServerGSO, res.ClientGSO)
	}
	if res.Errors > 0 {
		fmt.Fprintln(os.Stderr, "quicload: a stream failed the check:", res.FirstError)
		os.Exit(1)
	}
}

// measure dials the connections, runs the workload through the warm-up
// and the measured window, asks the server about GSO and closes the
// connections. A stream that fails its check is in the result's errors;
// the error is for a run that could not take place.
func measure(cfg config) (result, error) {
	mode, conns, size, depth := cfg.mode, cfg.conns, cfg.size, cfg.depth
	switch {
	case mode != "rr" && mode != "bulk":
		return result{}, fmt.Errorf("unknown mode %q (rr or bulk)", mode)
	case conns < 1 || depth < 1 || size < 1:
		return result{}, errors.New("-conns, -depth and -size must be positive")
	case mode == "rr" && size > quicwork.MaxRequest:
		return result{}, fmt.Errorf("-size %d: a request is at most %d bytes", size, quicwork.MaxRequest)
	}
	raddr, err := net.ResolveUDPAddr("udp4", cfg.addr)
	if err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	qconns := make([]*quic.Conn, conns)
	var transports []*quic.Transport
	defer func() {
		for _, c := range qconns {
			if c != nil {
				_ = c.CloseWithError(0, "done")
			}
		}
		for _, tr := range transports {
			_ = tr.Close()
			_ = tr.Conn.Close()
		}
	}()
	for i := range qconns {
		uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return result{}, err
		}
		tr := &quic.Transport{Conn: uc}
		transports = append(transports, tr)
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		qconns[i], err = tr.Dial(dctx, raddr, quicwork.ClientTLS(), quicwork.Config())
		dcancel()
		if err != nil {
			return result{}, fmt.Errorf("dial %d: %w", i, err)
		}
	}

	r := &runner{size: size}
	workers := make([]*worker, conns*depth)
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{}
		workers[i] = w
		c := qconns[i/depth]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if mode == "rr" {
				err = r.requests(ctx, c, w, uint64(i))
			} else {
				err = r.download(ctx, c, w)
			}
			if err != nil {
				r.fail(err)
			}
		}()
	}
	sum := func() (n, b uint64) {
		for _, w := range workers {
			wn, wb := w.load()
			n += wn
			b += wb
		}
		return n, b
	}

	phase := func(p string) {
		if cfg.onPhase != nil {
			cfg.onPhase(p)
		}
	}
	time.Sleep(cfg.warmup)
	phase("measure")
	cpu0 := cpuSeconds()
	n0, b0 := sum()
	r.measuring.Store(true)
	t0 := time.Now()
	time.Sleep(cfg.duration)
	r.measuring.Store(false)
	n1, b1 := sum()
	el := time.Since(t0).Seconds()
	cpu := cpuSeconds() - cpu0
	phase("done")

	res := result{Mode: mode, Conns: conns, Size: size, Depth: depth, Elapsed: el, ClientCPU: cpu}
	res.ServerGSO, res.ClientGSO = gsoState(ctx, qconns)
	r.stopping.Store(true)
	cancel()
	for _, c := range qconns {
		_ = c.CloseWithError(0, "done")
	}
	wg.Wait()

	res.Bytes = b1 - b0
	res.MBps = float64(res.Bytes) / el / 1e6
	if mode == "rr" {
		res.Requests = n1 - n0
	} else {
		res.Requests = res.Bytes / uint64(size)
	}
	res.RPS = float64(res.Requests) / el
	var h hist.Hist
	for _, w := range workers {
		h.Merge(&w.lat)
	}
	res.P50, res.P99, res.P999, res.Max = h.Quantile(0.5), h.Quantile(0.99), h.Quantile(0.999), h.Max()
	if r.firstError != nil {
		res.Errors, res.FirstError = 1, r.firstError.Error()
	}
	return res, nil
}

// requests runs one stream after another on c, each a request of r.size
// bytes whose response must be the same bytes. id makes the payloads of
// every worker and request differ, so a response given to the wrong stream
// fails the check.
func (r *runner) requests(ctx context.Context, c *quic.Conn, w *worker, id uint64) error {
	req := make([]byte, 1+r.size)
	req[0] = quicwork.OpEcho
	for i := 1; i < len(req); i++ {
		req[i] = byte(i*7 + int(id))
	}
	resp := make([]byte, r.size+1)
	for seq := uint64(0); ; seq++ {
		stamp(req[1:], id, seq)
		start := time.Now()
		s, err := c.OpenStreamSync(ctx)
		if err != nil {
			return err
		}
		if _, err := s.Write(req); err != nil {
			return err
		}
		if err := s.Close(); err != nil {
			return err
		}
		n, err := io.ReadFull(s, resp)
		if !errors.Is(err, io.ErrUnexpectedEOF) || n != r.size {
			if err == nil {
				err = fmt.Errorf("response longer than the %d-byte request", r.size)
			}
			return fmt.Errorf("response: %d bytes: %w", n, err)
		}
		if !bytes.Equal(resp[:n], req[1:]) {
			return fmt.Errorf("response to request %d of stream loop %d differs from the request", seq, id)
		}
		if r.measuring.Load() {
			w.lat.Record(uint64(time.Since(start)))
		}
		w.add(1, uint64(n))
	}
}

// stamp writes the worker and request numbers into the payload's first
// bytes (as many as fit).
func stamp(p []byte, id, seq uint64) {
	var b [16]byte
	for i := range 8 {
		b[i] = byte(id >> (8 * i))
		b[8+i] = byte(seq >> (8 * i))
	}
	copy(p, b[:])
}

// download reads a bulk stream and checks every byte against the pattern.
func (r *runner) download(ctx context.Context, c *quic.Conn, w *worker) error {
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	if _, err := s.Write([]byte{quicwork.OpBulk}); err != nil {
		return err
	}
	if err := s.Close(); err != nil {
		return err
	}
	defer s.CancelRead(0)
	buf := make([]byte, quicwork.BulkChunk)
	var off uint64
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if !bytes.Equal(buf[:n], quicwork.Bulk(off, n)) {
				return fmt.Errorf("bulk stream differs from the pattern in the %d bytes at offset %d", n, off)
			}
			off += uint64(n)
			w.add(0, uint64(n))
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("bulk stream ended at offset %d", off)
			}
			return err
		}
	}
}

// gsoState asks the server, on a stream of each connection, whether it
// sends that connection's packets with GSO, and reads the same of this
// side from quic-go.
func gsoState(ctx context.Context, qconns []*quic.Conn) (server, client string) {
	var srvOn, cliOn, answered int
	for _, c := range qconns {
		if c.ConnectionState().GSO {
			cliOn++
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		on, err := askGSO(qctx, c)
		cancel()
		if err != nil {
			continue
		}
		answered++
		if on {
			srvOn++
		}
	}
	server = gsoText(srvOn, answered)
	if answered < len(qconns) {
		server += fmt.Sprintf(" (%d of %d connections answered)", answered, len(qconns))
	}
	return server, gsoText(cliOn, len(qconns))
}

func askGSO(ctx context.Context, c *quic.Conn) (bool, error) {
	s, err := c.OpenStreamSync(ctx)
	if err != nil {
		return false, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(deadline)
	}
	if _, err := s.Write([]byte{quicwork.OpGSO}); err != nil {
		return false, err
	}
	_ = s.Close()
	b, err := io.ReadAll(s)
	if err != nil {
		return false, err
	}
	if len(b) != 1 || (b[0] != '0' && b[0] != '1') {
		return false, fmt.Errorf("GSO answer %q", b)
	}
	return b[0] == '1', nil
}

func gsoText(on, of int) string {
	switch {
	case of == 0:
		return "unknown"
	case on == of:
		return "on"
	case on == 0:
		return "off"
	}
	return fmt.Sprintf("on %d/%d", on, of)
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

func dur(ns uint64) time.Duration { return time.Duration(ns).Round(time.Microsecond / 10) }
