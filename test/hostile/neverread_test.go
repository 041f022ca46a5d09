package hostile

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// Peers that stream newlines at a line server answering each with 16
// bytes, and never read the answers: each line costs the server sixteen
// times its size in answers, which the peer refuses. Reading pauses where
// the answers back up, so the attack costs the server CPU and memory only
// until its connections stall, as a goroutine per connection blocked in
// its Write does over package net. Then the peers reset: the paused
// connections notice it (the loops sweep them every 2 s) and close.

// atkAnswer16 is the answer to every line.
var atkAnswer16 = []byte("answer-16-bytes\n")

// atkLines16 answers every complete line with atkAnswer16, remembering
// how far it searched for the newline; it counts its connections.
type atkLines16 struct {
	scanned int
	open    *atomic.Int64
}

func (h *atkLines16) OnOpen(*conn.Conn)         { h.open.Add(1) }
func (h *atkLines16) OnData(*conn.Conn, []byte) {}
func (h *atkLines16) OnClose(*conn.Conn, error) { h.open.Add(-1) }
func (h *atkLines16) OnRead(c *conn.Conn, data []byte) int {
	consumed := 0
	for {
		i := bytes.IndexByte(data[consumed+h.scanned:], '\n')
		if i < 0 {
			h.scanned = len(data) - consumed
			return consumed
		}
		if _, err := c.Write(atkAnswer16); err != nil {
			return len(data)
		}
		consumed += h.scanned + i + 1
		h.scanned = 0
	}
}

// atkServeLines16Net is the same line server on package net: a goroutine
// per connection reads lines and answers each, flushing once it has
// answered every line it has read. It returns the address, the count of
// open connections and a function that stops it.
func atkServeLines16Net(t *testing.T) (net.Addr, *atomic.Int64, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var open atomic.Int64
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			open.Add(1)
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					c.Close()
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					open.Add(-1)
				}()
				r := bufio.NewReader(c)
				w := bufio.NewWriter(c)
				for {
					if _, err := r.ReadSlice('\n'); err != nil {
						return
					}
					if _, err := w.Write(atkAnswer16); err != nil {
						return
					}
					if r.Buffered() == 0 {
						if err := w.Flush(); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr(), &open, func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// TestNeverReadLinesCheap: peers each stream 1 MiB of newlines to a line
// server answering each line with 16 bytes, and never read; a canary
// client in another process sends one line at a time meanwhile. Then the
// peers reset (SO_LINGER 0 and close). On both backends, against package
// net with the same handler: the process's CPU time during the attack is
// at most package net's, the canary is never reset and its p99 is at most
// twice package net's, the peak RSS at most 1.5 times package net's (and
// 16 MiB); no server connection is left 10 s after the reset (the figure
// 3 s after it is logged), and a fresh client is answered then.
func TestNeverReadLinesCheap(t *testing.T) {
	atkCanaryChild()
	n := scale(500, 100)
	atkNeedFds(t, 2*n+64)
	attack := time.Duration(scale(5, 3)) * time.Second
	stream := bytes.Repeat([]byte("\n"), 1<<20)
	figs := new(atkFigures)
	atkRun(t, atkTargets(true, false), func(t *testing.T, tg atkTarget, g *loop.Group) {
		var addr net.Addr
		var open func() int
		if tg.net {
			a, o, stop := atkServeLines16Net(t)
			defer stop()
			addr, open = a, func() int { return int(o.Load()) }
		} else {
			var o atomic.Int64
			srv, err := conn.ListenFunc(context.Background(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler {
				return &atkLines16{open: &o}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			addr = srv.Addr()
			open = func() int { return max(int(o.Load()), srv.Conns()) }
		}
		canary := atkStartCanary(t, "TestNeverReadLinesCheap", "line16", addr)
		w := watchMem(t)
		peers := atkDialAll(t, &net.Dialer{Control: atkSlowReader}, addr.String(), n, nil)
		cpu0 := atkCPU()
		start := time.Now()
		// Each peer writes its 1 MiB of newlines until the server stops
		// taking them, or all of it; the attack lasts until every peer's
		// write returned.
		var wg sync.WaitGroup
		var whole atomic.Int64
		var written atomic.Int64
		for _, nc := range peers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				nc.SetWriteDeadline(start.Add(attack))
				k, err := nc.Write(stream)
				written.Add(int64(k))
				if err == nil {
					whole.Add(1)
				}
			}()
		}
		wg.Wait()
		cpu := atkCPU() - cpu0
		took := time.Since(start)
		heap, rss := w.end()
		res := canary.end()
		// The peers reset.
		for _, nc := range peers {
			nc.(*net.TCPConn).SetLinger(0)
			nc.Close()
		}
		reset := time.Now()
		time.Sleep(3*time.Second - time.Since(reset))
		at3 := open()
		zero := testutil.Eventually(10*time.Second-time.Since(reset), func() bool { return open() == 0 })
		after := time.Since(reset)
		t.Logf("%s: %d peers wrote %d MiB of newlines in %v (%d all of it); process CPU time %v; server connections open 3 s after the reset: %d, %d after %v",
			tg, n, written.Load()>>20, took.Round(time.Millisecond), whole.Load(), cpu.Round(time.Millisecond), at3, open(), after.Round(time.Millisecond))
		if !zero {
			t.Errorf("%d server connections still open 10 s after their peers reset", open())
		}
		// A fresh client is answered.
		fc, err := net.DialTimeout("tcp", addr.String(), 10*time.Second)
		if err != nil {
			t.Fatalf("a fresh client after the attack: %v", err)
		}
		err = atkLineRoundTrip(fc, []byte("fresh\n"), len(atkAnswer16))()
		fc.Close()
		if err != nil {
			t.Errorf("a fresh client after the attack got no answer: %v", err)
		}
		atkCheckCanary(t, tg, figs, "p99", res)
		atkCheckMem(t, tg, figs, "rss", heap, rss, 16<<20, false)
		if tg.net {
			figs.set("cpu", float64(cpu))
		} else if ref, ok := figs.get("cpu"); ok {
			t.Logf("CPU time %v: %.2f× package net's %v", cpu.Round(time.Millisecond), float64(cpu)/ref, time.Duration(ref).Round(time.Millisecond))
			if float64(cpu) > ref {
				missed(t, false, "the attack cost the process %v of CPU time, more than package net's %v", cpu.Round(time.Millisecond), time.Duration(ref).Round(time.Millisecond))
			}
		}
	})
}
