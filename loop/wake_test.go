package loop_test

import (
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// taskingChain is a Completer that, from inside each completion, queues a tail
// task and a task (as conn's Write does from OnData) and starts the next
// NOP, until n completions have been seen.
type taskingChain struct {
	l    *loop.Loop
	n    int
	done chan struct{}
}

func (c *taskingChain) Complete(*loop.Completion) {
	c.l.ExecuteAfterTurn(func() {})
	c.l.Execute(func() {})
	if c.n--; c.n == 0 {
		close(c.done)
		return
	}
	if _, err := c.l.Nop(c); err != nil {
		panic(err)
	}
}

// TestCallbacksDoNotWriteEventfd checks that tasks queued from completion
// callbacks do not write the eventfd: the loop counts as awake from its
// first delivered completion, so only other goroutines ever wake it.
func TestCallbacksDoNotWriteEventfd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		l := g.Loop(0)
		runOn(t, l, func() {})
		before := l.Stats().WakeWrites
		c := &taskingChain{l: l, n: 2000, done: make(chan struct{})}
		runOn(t, l, func() {
			if _, err := l.Nop(c); err != nil {
				t.Error(err)
			}
		})
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Fatal("NOP chain did not finish")
		}
		// runOn itself may wake the loop once.
		if w := l.Stats().WakeWrites - before; w > 1 {
			t.Fatalf("2000 completions queueing tasks made %d eventfd writes", w)
		}
	})
}
