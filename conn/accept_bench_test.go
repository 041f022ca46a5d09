package conn_test

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// BenchmarkEcho measures echo round trips over loopback. One op is one
// message of size bytes written by a client and read back in full; conns
// clients run at once, each with one message in flight. The client is the
// same for every backend: a goroutine per connection on package net.
// backend=net is the baseline server: the standard library with a goroutine
// per connection. uring and epoll use a group of GOMAXPROCS loops.
//
//	go test ./conn/ -run '^$' -bench BenchmarkEcho -benchtime=2s
func BenchmarkEcho(b *testing.B) {
	for _, backend := range []string{"uring", "epoll", "net"} {
		for _, conns := range []int{1, 64} {
			for _, size := range []int{64, 4096} {
				b.Run(fmt.Sprintf("backend=%s/conns=%d/size=%d", backend, conns, size), func(b *testing.B) {
					accBenchEcho(b, backend, conns, size)
				})
			}
		}
	}
}

func accBenchEcho(b *testing.B, backend string, conns, size int) {
	var addr string
	switch backend {
	case "uring", "epoll":
		lb := loop.BackendEpoll
		if backend == "uring" {
			testutil.SkipIfNoUring(b)
			lb = loop.BackendUring
		}
		addr = accListen(b, accGroup(b, lb), accEcho{}).Addr().String()
	case "net":
		addr = accNetEchoServer(b)
	}
	clients := make([]net.Conn, conns)
	for i := range clients {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	accRoundTrips(b, conns, size, func(i int, msg, got []byte) error {
		if _, err := clients[i].Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(clients[i], got)
		return err
	})
}

// accRoundTrips runs b.N round trips of size bytes spread over conns
// goroutines, one per connection; roundTrip does one on connection i.
func accRoundTrips(b *testing.B, conns, size int, roundTrip func(i int, msg, got []byte) error) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg, got := make([]byte, size), make([]byte, size)
			for next.Add(1) <= int64(b.N) {
				if err := roundTrip(i, msg, got); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// accNetEchoServer is the baseline: package net, a goroutine per connection
// copying through a 64 KiB buffer (not io.Copy, which would splice).
func accNetEchoServer(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
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
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// BenchmarkAccept measures the accept path: one op is one TCP connection
// that a client connects, the server accepts and opens on a worker loop
// (socket options, addresses, OnOpen), and the client then resets. The
// client connects accBatch connections before it waits for them to open,
// so that the server accepts several per loop turn, and uses raw blocking
// system calls that set no option on its side, so that the server's
// per-connection work weighs as much as it can.
//
//	go test ./conn/ -run '^$' -bench BenchmarkAccept -count 5
func BenchmarkAccept(b *testing.B) {
	for _, lb := range accBackends {
		b.Run("backend="+lb.String(), func(b *testing.B) {
			if lb == loop.BackendUring {
				testutil.SkipIfNoUring(b)
			}
			opened := make(chan struct{}, accBatch)
			srv := accListen(b, accGroup(b, lb), accOpened{opened: opened})
			sa := &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: srv.Addr().(*net.TCPAddr).Port}
			fds := make([]int, 0, accBatch)
			reset := func() {
				for _, fd := range fds {
					// A reset leaves no TIME_WAIT socket behind to run
					// the client out of ports.
					unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
					unix.Close(fd)
				}
				fds = fds[:0]
			}
			defer reset()
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(accBatch, b.N-done)
				for range n {
					fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
					if err != nil {
						b.Fatal(err)
					}
					fds = append(fds, fd)
					if err := unix.Connect(fd, sa); err != nil {
						b.Fatal(err)
					}
				}
				for range n {
					select {
					case <-opened:
					case <-time.After(10 * time.Second):
						b.Fatal("no connection opened within 10s")
					}
				}
				reset()
				done += n
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conns/s")
		})
	}
}

// accBatch is how many connections BenchmarkAccept connects at once.
const accBatch = 16

// accOpened signals every connection it opens.
type accOpened struct {
	conn.NopHandler
	opened chan<- struct{}
}

func (h accOpened) OnOpen(*conn.Conn) { h.opened <- struct{}{} }
