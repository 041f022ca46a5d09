//go:build linux

package loop_test

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/loop"
)

// TestFdReusedAfterRawClose: an fd that had an op (so the epoll backend
// registered it) is closed with close(2) instead of loop.IO.Close, and a new
// socket takes its number. An op on the new socket must still complete: the
// epoll backend has to notice that the number now names another file.
func TestFdReusedAfterRawClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)

		// submit runs op on the loop and returns the channel its result
		// arrives on.
		submit := func(t *testing.T, op func(c loop.Completer) (loop.OpID, error)) chan int32 {
			res := make(chan int32, 1)
			runOn(t, l, func() {
				if _, err := op(completerFunc(func(c *loop.Completion) {
					if !c.More() {
						res <- c.Res
					}
				})); err != nil {
					t.Error(err)
				}
			})
			return res
		}
		wait := func(t *testing.T, what string, res chan int32) int32 {
			t.Helper()
			select {
			case r := <-res:
				return r
			case <-time.After(5 * time.Second):
				t.Fatalf("%s did not complete within 5s", what)
				return 0
			}
		}
		// reuse closes fd with close(2) and puts a new socket (fresh) on
		// its number.
		reuse := func(t *testing.T, fd, fresh int) {
			t.Helper()
			if err := unix.Close(fd); err != nil {
				t.Fatal(err)
			}
			if _, err := unix.FcntlInt(uintptr(fresh), unix.F_DUPFD_CLOEXEC, fd); err != nil {
				t.Fatal(err)
			}
			unix.Close(fresh)
		}
		pair := func(t *testing.T) (int, int) {
			p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			return p[0], p[1]
		}

		t.Run("recv", func(t *testing.T) {
			a, peer := pair(t)
			defer unix.Close(peer)
			buf := make([]byte, 8)
			res := submit(t, func(c loop.Completer) (loop.OpID, error) { return l.IO().Recv(a, buf, 0, c) })
			unix.Write(peer, []byte("x"))
			if r := wait(t, "first recv", res); r != 1 {
				t.Fatalf("first recv: %d", r)
			}
			// The same number, a new socket.
			a2, peer2 := pair(t)
			defer unix.Close(peer2)
			reuse(t, a, a2)
			defer unix.Close(a)
			res = submit(t, func(c loop.Completer) (loop.OpID, error) { return l.IO().Recv(a, buf, 0, c) })
			waitAsleep(t, l) // the recv waits for readiness
			unix.Write(peer2, []byte("yz"))
			if r := wait(t, "recv on the reused fd", res); r != 2 {
				t.Fatalf("recv on the reused fd: %d", r)
			}
		})

		t.Run("accept", func(t *testing.T) {
			listen := func() (int, unix.Sockaddr) {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
					t.Fatal(err)
				}
				if err := unix.Listen(fd, 16); err != nil {
					t.Fatal(err)
				}
				sa, err := unix.Getsockname(fd)
				if err != nil {
					t.Fatal(err)
				}
				return fd, sa
			}
			dial := func(sa unix.Sockaddr) {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { unix.Close(fd) })
				if err := unix.Connect(fd, sa); err != nil {
					t.Fatal(err)
				}
			}
			lfd, sa := listen()
			res := submit(t, func(c loop.Completer) (loop.OpID, error) { return l.IO().Accept(lfd, false, c) })
			dial(sa)
			r := wait(t, "first accept", res)
			if r < 0 {
				t.Fatalf("first accept: %d", r)
			}
			unix.Close(int(r))
			l2, sa2 := listen()
			reuse(t, lfd, l2)
			defer unix.Close(lfd)
			res = submit(t, func(c loop.Completer) (loop.OpID, error) { return l.IO().Accept(lfd, false, c) })
			waitAsleep(t, l) // the accept waits for readiness
			dial(sa2)
			r = wait(t, "accept on the reused fd", res)
			if r < 0 {
				t.Fatalf("accept on the reused fd: %d", r)
			}
			unix.Close(int(r))
		})
	})
}
