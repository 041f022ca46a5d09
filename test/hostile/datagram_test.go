package hostile

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// A flood of tiny datagrams at a NetPacketConn whose reader is slow. Each
// queued datagram is charged the memory it takes, empty ones too, so the
// queue stays within its bound and the rest are dropped and counted.

// TestDatagramFlood floods empty and 1-byte datagrams at a ListenPacketNet
// server that reads one datagram a millisecond.
func TestDatagramFlood(t *testing.T) {
	dur := time.Duration(scale(6, 2)) * time.Second
	for _, size := range []int{0, 1} {
		t.Run("size="+string(rune('0'+size)), func(t *testing.T) {
			backends(t, func(t *testing.T, b loop.Backend) {
				g := newGroup(t, b, 1)
				np, err := conn.ListenPacketNet(t.Context(), g, "udp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer np.Close()
				var got atomic.Int64
				readerDone := make(chan struct{})
				go func() {
					defer close(readerDone)
					buf := make([]byte, 64)
					for {
						if _, _, err := np.ReadFrom(buf); err != nil {
							return
						}
						got.Add(1)
						time.Sleep(time.Millisecond)
					}
				}()
				w := watchMem(t)
				flood(t, np.LocalAddr().String(), size, dur)
				w.check(t, "a flood of tiny datagrams", 16<<20, 24<<20)
				if np.Dropped() == 0 {
					t.Errorf("Dropped is 0 after a %v flood read at 1,000 datagrams a second", dur)
				}
				t.Logf("%d read, %d dropped", got.Load(), np.Dropped())
				// The queue still works: a datagram sent once it drained
				// arrives.
				before := got.Load()
				c, err := net.Dial("udp", np.LocalAddr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				polls := 0
				if !testutil.Eventually(10*time.Second, func() bool {
					if got.Load() != before {
						return true
					}
					if polls%20 == 0 { // one every 20 polls: the queue drains meanwhile
						c.Write([]byte("after"))
					}
					polls++
					return false
				}) {
					t.Error("no datagram read after the flood")
				}
				np.Close()
				<-readerDone
			})
		})
	}
}

// flood sends datagrams of size bytes to addr as fast as it can for d.
func flood(t *testing.T, addr string, size int, d time.Duration) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := make([]byte, size)
	var sent int
	for stop := time.Now().Add(d); time.Now().Before(stop); {
		for range 256 {
			c.Write(p) // ECONNREFUSED and ENOBUFS are part of a flood
			sent++
		}
	}
	t.Logf("%d datagrams of %d bytes sent in %v", sent, size, d)
}
