package loop_test

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/loop"
)

// A group of loops, work spread round robin, and a clean shutdown.
func ExampleNewGroup() {
	g, err := loop.NewGroup(loop.WithLoops(2))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("backend:", g.Backend(), "fallback:", g.Features().FallbackReason)
	done := make(chan struct{})
	g.Next().Execute(func() { close(done) })
	<-done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = g.Shutdown(ctx)
}

// Execute runs a function on the loop goroutine; from there the loop's IO is
// available.
func ExampleLoop_Execute() {
	g, _ := loop.NewGroup(loop.WithLoops(1))
	defer g.Shutdown(context.Background())
	l := g.Next()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	unix.Write(fds[1], []byte("hi"))
	buf := make([]byte, 16)
	res := make(chan int32, 1)
	l.Execute(func() {
		// On the loop: receive what the peer sent.
		l.IO().Recv(fds[0], buf, 0, completion(func(c *loop.Completion) { res <- c.Res }))
	})
	fmt.Println(<-res) // 2
}

// Schedule runs a function on the loop after a delay; the timer can be
// stopped and observed.
func ExampleLoop_Schedule() {
	g, _ := loop.NewGroup(loop.WithLoops(1))
	defer g.Shutdown(context.Background())
	t, err := g.Next().Schedule(20*time.Millisecond, func() { fmt.Println("tick") })
	if err != nil {
		return
	}
	<-t.Future().Done()
}

type completion func(*loop.Completion)

func (f completion) Complete(c *loop.Completion) { f(c) }
