//go:build linux

package loadgen

import (
	"net"
	"strings"
	"testing"
	"time"
)

// server starts an echo server that passes each chunk through f first.
func server(t *testing.T, f func([]byte)) string {
	return serverIgnoring(t, -1, f)
}

// serverIgnoring is server, except that the connection accepted ignore-th
// (from 0) is held open and never read nor answered.
func serverIgnoring(t *testing.T, ignore int, f func([]byte)) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if i == ignore {
				t.Cleanup(func() { c.Close() })
				continue
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						f(buf[:n])
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
	return ln.Addr().String()
}

func TestEchoVerified(t *testing.T) {
	addr := server(t, func([]byte) {})
	for _, depth := range []int{1, 8} {
		res, err := Run(Config{Addr: addr, Conns: 4, Size: 1000, Depth: depth, Warmup: 50 * time.Millisecond,
			Duration: 300 * time.Millisecond, Requests: 1 << 40})
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || res.Requests == 0 {
			t.Fatalf("depth %d: %d requests, %d errors (%s)", depth, res.Requests, res.Errors, res.FirstError)
		}
		if res.P50 == 0 || res.P99 < res.P50 || res.P999 < res.P99 || res.Max < res.P999 {
			t.Fatalf("latency quantiles out of order: %+v", res)
		}
		if res.MinShare <= 0 || res.MinShare > 1 {
			t.Fatalf("depth %d: least served connection's share %v, want in (0, 1] when every connection is echoed", depth, res.MinShare)
		}
	}
}

// TestMinShareSeesAStarvedConnection: a server that never answers one of
// the connections posts a rate, but its least served connection's share
// is 0.
func TestMinShareSeesAStarvedConnection(t *testing.T) {
	addr := serverIgnoring(t, 0, func([]byte) {})
	res, err := Run(Config{Addr: addr, Conns: 4, Size: 100, Depth: 2, Warmup: 50 * time.Millisecond,
		Duration: 300 * time.Millisecond, Requests: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 {
		t.Fatalf("no request answered on the three served connections: %+v", res)
	}
	if res.MinShare != 0 {
		t.Fatalf("least served connection's share %v, want 0 with one connection never answered", res.MinShare)
	}
}

func TestRequestBound(t *testing.T) {
	addr := server(t, func([]byte) {})
	start := time.Now()
	res, err := Run(Config{Addr: addr, Conns: 2, Size: 64, Depth: 1, Duration: 10 * time.Second, Requests: 500})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests < 500 || res.Requests > 502 || time.Since(start) > 5*time.Second {
		t.Fatalf("%d requests in %v, want 500 well before the 10 s bound", res.Requests, time.Since(start))
	}
}

func TestCorruptionDetected(t *testing.T) {
	n := 0
	addr := server(t, func(b []byte) {
		n++
		if n == 20 {
			b[len(b)/2] ^= 0x55
		}
	})
	res, err := Run(Config{Addr: addr, Conns: 1, Size: 128, Depth: 1, Duration: 300 * time.Millisecond, Requests: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 1 || !strings.Contains(res.FirstError, "mismatch") {
		t.Fatalf("errors %d %q, want one echo mismatch", res.Errors, res.FirstError)
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []Config{
		{Addr: "127.0.0.1:1", Conns: 1, Size: 1, Depth: 1, Duration: time.Second},    // no request bound
		{Addr: "127.0.0.1:1", Conns: 1, Size: 1, Depth: 1, Requests: 1},              // no duration
		{Addr: "127.0.0.1:1", Conns: 0, Size: 1, Depth: 1, Requests: 1, Duration: 1}, // no connections
	} {
		if _, err := Run(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
