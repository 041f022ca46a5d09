package conn_test

import (
	"context"
	"encoding/binary"
	"errors"
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

// TestDirectSendOrder: Writes from several goroutines, each a run of
// numbered records, some made directly by the writing goroutine and some
// handed to the loop (the peer reads slowly at first, so the socket fills
// and writes queue), reach the peer complete and in each writer's order.
func TestDirectSendOrder(t *testing.T) {
	var direct, full atomic.Int64
	conn.SetDirectHook(func(n int, err error) {
		direct.Add(1)
		if err == nil && n == 16 {
			full.Add(1)
		}
	})
	defer conn.SetDirectHook(nil)
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		const writers, records = 4, 20000
		direct.Store(0)
		full.Store(0)
		g := ctGroup(t, b, 1)
		ln := testutil.Loopback(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := conn.Dial(ctx, g, "tcp", ln.Addr().String(), ctNewEvents(t))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		peer, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer peer.Close()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var rec [16]byte
				for i := range records {
					binary.LittleEndian.PutUint64(rec[:8], uint64(w))
					binary.LittleEndian.PutUint64(rec[8:], uint64(i))
					if _, err := c.Write(rec[:]); err != nil {
						t.Errorf("writer %d record %d: %v", w, i, err)
						return
					}
				}
			}()
		}
		time.Sleep(20 * time.Millisecond) // let the socket buffer fill first
		next := make([]uint64, writers)
		buf := make([]byte, 16)
		peer.SetReadDeadline(time.Now().Add(20 * time.Second))
		for range writers * records {
			if _, err := io.ReadFull(peer, buf); err != nil {
				t.Fatalf("read: %v (next %v)", err, next)
			}
			w, i := binary.LittleEndian.Uint64(buf[:8]), binary.LittleEndian.Uint64(buf[8:])
			if w >= writers || i != next[w] {
				t.Fatalf("record (%d, %d), want writer < %d at %v", w, i, writers, next)
			}
			next[w]++
		}
		wg.Wait()
		t.Logf("%d direct sends, %d of them whole, of %d writes", direct.Load(), full.Load(), writers*records)
		if full.Load() == 0 {
			t.Fatal("no Write was sent directly")
		}
	})
}

// TestDirectSendCloseRace: Writes racing with Close never write to the fd
// after it closed (the fd number is reused at once by a fresh socket, which
// must receive nothing) and fail with net.ErrClosed once Close ran.
func TestDirectSendCloseRace(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		ln := testutil.Loopback(t)
		for round := range 50 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			c, err := conn.Dial(ctx, g, "tcp", ln.Addr().String(), ctNewEvents(t))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			peer, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := c.Write([]byte("x")); err != nil {
							if !errors.Is(err, net.ErrClosed) {
								t.Errorf("round %d: Write: %v", round, err)
							}
							return
						}
					}
				}()
			}
			time.Sleep(time.Millisecond)
			c.Close()
			// Sockets that may take the closed fd's number while the
			// writers still run.
			var fds []int
			for range 8 {
				pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				fds = append(fds, pair[0], pair[1])
				time.Sleep(100 * time.Microsecond)
			}
			close(stop)
			wg.Wait()
			for _, fd := range fds {
				if n, _, _ := unix.Recvfrom(fd, make([]byte, 64), unix.MSG_DONTWAIT); n > 0 {
					t.Fatalf("round %d: %d bytes of a closed connection reached another socket", round, n)
				}
				unix.Close(fd)
			}
			peer.Close()
		}
	})
}
