//go:build ringfault && linux

package conn_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// TestFaultStartFailureClosesEachFdOnce: a loop whose start fails refuses
// the task that started it and still runs it as it terminates. Dials and
// accept hand-offs to such loops must close their socket once: a second
// close hits whatever file took the number meanwhile. A goroutine keeps
// opening pipes and checks that none of its fds is closed or replaced
// under it.
func TestFaultStartFailureClosesEachFdOnce(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		// The healthy side: a listener whose acceptor runs.
		good := ctGroup(t, b, 1)
		target := ctListen(t, "tcp", "127.0.0.1:0", good, ctNewServerHandler(t, nil))
		restore := loop.SetFaults(loop.Faults{Seed: 1, StartFail: 1})
		defer restore()

		stop := make(chan struct{})
		var wg sync.WaitGroup
		var stolen atomic.Int64
		var checked atomic.Int64
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					var p [2]int
					if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
						continue
					}
					var st0 [2]unix.Stat_t
					unix.Fstat(p[0], &st0[0])
					unix.Fstat(p[1], &st0[1])
					time.Sleep(50 * time.Microsecond)
					for i, fd := range p {
						var st unix.Stat_t
						if err := unix.Fstat(fd, &st); err != nil || st.Ino != st0[i].Ino || st.Dev != st0[i].Dev {
							stolen.Add(1)
							continue // not ours any more: do not close it
						}
						unix.Close(fd)
					}
					checked.Add(1)
				}
			}()
		}

		const rounds = 200
		for range rounds {
			// A dial whose loop fails to start.
			bad, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(ctLogger))
			if err != nil {
				t.Fatal(err)
			}
			f := conn.DialAsync(context.Background(), bad, "tcp", target.Addr().String(), ctNewEvents(t))
			select {
			case <-f.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("a dial to a loop that failed to start did not end")
			}
			// Refused (ErrRejected), or run by the terminating loop,
			// which no longer takes ops (ErrClosed): either way once.
			if _, err, _ := f.Result(); !errors.Is(err, loop.ErrRejected) && !errors.Is(err, loop.ErrClosed) {
				t.Fatalf("dial on a loop that failed to start: %v, want ErrRejected or ErrClosed", err)
			}
			bad.Shutdown(context.Background())

			// An accept handed off to a worker loop that fails to
			// start.
			workers, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1), loop.WithLogger(ctLogger))
			if err != nil {
				t.Fatal(err)
			}
			srv, err := conn.Listen(context.Background(), workers, "tcp", "127.0.0.1:0", ctNewServerHandler(t, nil),
				conn.WithAcceptor(good.Loop(0)))
			if err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", srv.Addr().String())
			if err == nil {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Read(make([]byte, 1)); err == nil {
					t.Fatal("a connection handed to a loop that failed to start answered")
				} else if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal("a connection handed to a loop that failed to start stayed open")
				}
				c.Close()
			}
			srv.Close()
			workers.Shutdown(context.Background())
		}
		if n := loop.InjectedFaults().StartFails; n < rounds {
			t.Fatalf("only %d start failures injected", n)
		}
		close(stop)
		wg.Wait()
		if n := stolen.Load(); n != 0 {
			t.Fatalf("%d fds of another goroutine were closed or replaced under it (%d checked)", n, checked.Load())
		}
		t.Logf("%d dials and %d hand-offs to loops that failed to start; %d pipe pairs checked, none lost", rounds, rounds, checked.Load())
	})
}
