package conn_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// A mixed program: an http.Server whose handler asks a backend served by
// package net in the same process (an http.Server on net.Listen, called
// through an http.Client) and answers with the backend's reply. The front
// server runs either on conn.ListenNet or, for comparison, on net.Listen.
// Its goroutines and the backend's share the Ps with the group's loops, so
// a loop that keeps a P while it waits delays the backend.

// mixedSetup is how the front server of a mixed program runs: on package
// net (net true), or on a NetListener of a group of backend with the
// thread mode shared.
type mixedSetup struct {
	net     bool
	backend loop.Backend
	shared  bool
}

func (s mixedSetup) String() string {
	if s.net {
		return "server=net"
	}
	thread := "locked"
	if s.shared {
		thread = "shared"
	}
	return "server=adapter/backend=" + s.backend.String() + "/thread=" + thread
}

// mixedSetups lists the front servers compared: package net first, then
// the adapters on each backend and thread mode.
func mixedSetups() []mixedSetup {
	s := []mixedSetup{{net: true}}
	for _, b := range []loop.Backend{loop.BackendUring, loop.BackendEpoll} {
		for _, shared := range []bool{true, false} {
			s = append(s, mixedSetup{backend: b, shared: shared})
		}
	}
	return s
}

// A mixedProgram is a running mixed program; close stops it.
type mixedProgram struct {
	url     string        // the front server's URL
	client  *http.Client  // the load's client, package net, conns connections
	front   *http.Server  // on ListenNet or net.Listen
	backend *http.Server  // on net.Listen
	group   *loop.Group   // the front's group, nil on package net
	idle    []func()      // close the load's and the handler's idle connections
	served  chan struct{} // closed once both Serves returned
}

// mixedAnswer is the backend's answer, relayed by the front server.
const mixedAnswer = "backend answer 0123456789"

// startMixed starts a mixed program of the setup whose load uses up to
// conns connections. The group, on an adapter front, has GOMAXPROCS loops.
func startMixed(tb testing.TB, s mixedSetup, conns int) *mixedProgram {
	return startMixedProgram(tb, s, conns, true)
}

// startMixedProgram is startMixed; with ask false the front server
// answers itself, without asking the backend.
func startMixedProgram(tb testing.TB, s mixedSetup, conns int, ask bool) *mixedProgram {
	tb.Helper()
	p := &mixedProgram{served: make(chan struct{})}
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p.backend = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(mixedAnswer)))
		io.WriteString(w, mixedAnswer)
	})}
	backendURL := "http://" + bln.Addr().String() + "/"
	backendTr := &http.Transport{MaxIdleConnsPerHost: conns, DisableCompression: true}
	backendClient := &http.Client{Transport: backendTr}

	p.front = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ask {
			w.Header().Set("Content-Length", strconv.Itoa(len(mixedAnswer)))
			io.WriteString(w, mixedAnswer)
			return
		}
		resp, err := backendClient.Get(backendURL)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})}
	var fln net.Listener
	if s.net {
		fln, err = net.Listen("tcp", "127.0.0.1:0")
	} else {
		p.group, err = loop.NewGroup(loop.WithBackend(s.backend), loop.WithSharedThread(s.shared), loop.WithLogger(ctLogger))
		if err != nil {
			bln.Close()
			tb.Fatalf("NewGroup: %v", err)
		}
		fln, err = conn.ListenNet(context.Background(), p.group, "tcp", "127.0.0.1:0")
	}
	if err != nil {
		bln.Close()
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, sl := range []struct {
		srv *http.Server
		ln  net.Listener
	}{{p.backend, bln}, {p.front, fln}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sl.srv.Serve(sl.ln); !errors.Is(err, http.ErrServerClosed) {
				tb.Errorf("Serve: %v", err)
			}
		}()
	}
	go func() {
		wg.Wait()
		close(p.served)
	}()
	p.url = "http://" + fln.Addr().String() + "/"
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	p.client = &http.Client{Transport: tr}
	p.idle = []func(){tr.CloseIdleConnections, backendTr.CloseIdleConnections}
	return p
}

// close stops the program: the load's connections, the front server, its
// group if any, the backend; it waits for the Serves to return.
func (p *mixedProgram) close(tb testing.TB) {
	p.idle[0]()
	p.front.Close()
	if p.group != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := p.group.Shutdown(ctx); err != nil {
			tb.Errorf("group Shutdown: %v", err)
		}
		cancel()
	}
	p.backend.Close()
	p.idle[1]()
	select {
	case <-p.served:
	case <-time.After(10 * time.Second):
		tb.Errorf("Serve did not return within 10s of Close")
	}
}

// request makes one request to the front server and checks the answer.
func (p *mixedProgram) request() error {
	resp, err := p.client.Get(p.url)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(body) != mixedAnswer {
		return fmt.Errorf("status %d, body %q", resp.StatusCode, body)
	}
	return nil
}

// run makes n requests from conns goroutines at once and returns the
// latency of each.
func (p *mixedProgram) run(n, conns int) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	errs := make(chan error, conns)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += conns {
				start := time.Now()
				if err := p.request(); err != nil {
					errs <- err
					return
				}
				lat[i] = time.Since(start)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return lat, <-errs
}

// TestMixedHTTP: a mixed program on the adapters, on both backends and
// thread modes, at GOMAXPROCS 1, 2 and 4, answers every request, from 1
// and from 16 connections at once, and leaves nothing behind. The bound is
// generous: it catches a program that starves (a backend goroutine that
// never gets a P), not one that is slow.
func TestMixedHTTP(t *testing.T) {
	for _, procs := range []int{1, 2, 4} {
		t.Run("procs="+strconv.Itoa(procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for _, s := range mixedSetups()[1:] {
				t.Run(s.String(), func(t *testing.T) {
					if s.backend == loop.BackendUring {
						testutil.SkipIfNoUring(t)
					}
					testutil.CheckLeaks(t)
					testutil.Watchdog(t, 60*time.Second)
					for _, conns := range []int{1, 16} {
						p := startMixed(t, s, conns)
						n := 50
						if conns > 1 {
							n = 8 * conns
						}
						start := time.Now()
						_, err := p.run(n, conns)
						took := time.Since(start)
						p.close(t)
						if err != nil {
							t.Fatalf("conns=%d: %v", conns, err)
						}
						if took > 30*time.Second {
							t.Errorf("conns=%d: %d requests took %v", conns, n, took)
						}
					}
				})
			}
		})
	}
}

// BenchmarkMixedHTTP: the mixed program's request latency, the front
// server on package net beside the adapters on each backend and thread
// mode, with 1 and with 64 connections of load. Run with -cpu 1,2,4 to
// vary GOMAXPROCS (the group has as many loops). It reports the median
// and 99th percentile latency (p50-ns, p99-ns) and the process's CPU time
// per request (cpu-ns/op: load, front and backend together). On a shared
// machine, compare setups from runs that alternate them.
func BenchmarkMixedHTTP(b *testing.B) {
	for _, conns := range []int{1, 64} {
		for _, s := range mixedSetups() {
			b.Run("conns="+strconv.Itoa(conns)+"/"+s.String(), func(b *testing.B) {
				if s.backend == loop.BackendUring {
					testutil.SkipIfNoUring(b)
				}
				p := startMixed(b, s, conns)
				defer p.close(b)
				// Open the connections before timing.
				if _, err := p.run(2*conns, conns); err != nil {
					b.Fatal(err)
				}
				benchLatencies(b, func(n int) ([]time.Duration, error) { return p.run(n, conns) })
			})
		}
	}
}

// BenchmarkNetHTTP: as BenchmarkMixedHTTP, but the front server answers
// itself: net/http alone on the adapters beside package net.
func BenchmarkNetHTTP(b *testing.B) {
	for _, conns := range []int{1, 64} {
		for _, s := range mixedSetups() {
			b.Run("conns="+strconv.Itoa(conns)+"/"+s.String(), func(b *testing.B) {
				if s.backend == loop.BackendUring {
					testutil.SkipIfNoUring(b)
				}
				p := startMixedProgram(b, s, conns, false)
				defer p.close(b)
				if _, err := p.run(2*conns, conns); err != nil {
					b.Fatal(err)
				}
				benchLatencies(b, func(n int) ([]time.Duration, error) { return p.run(n, conns) })
			})
		}
	}
}

// benchLatencies times run(b.N) and reports the latencies' p50 and p99
// and the process's CPU time per operation.
func benchLatencies(b *testing.B, run func(n int) ([]time.Duration, error)) {
	cpu0 := processCPU()
	b.ResetTimer()
	lat, err := run(b.N)
	b.StopTimer()
	cpu := processCPU() - cpu0
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// processCPU returns the CPU time, user and system, the process used so
// far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
