package loop_test

import (
	"context"
	"fmt"
	"time"

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

// Execute runs a function on the loop goroutine; from there the op API is
// available.
func ExampleLoop_Execute() {
	g, _ := loop.NewGroup(loop.WithLoops(1))
	defer g.Shutdown(context.Background())
	l := g.Next()
	res := make(chan int32, 1)
	l.Execute(func() {
		// On the loop: start a 10 ms timeout op.
		l.Timeout(10*time.Millisecond, completion(func(c *loop.Completion) { res <- c.Res }))
	})
	fmt.Println(<-res) // -ETIME
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
