package loop_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ringloop/ringloop/loop"
)

type localVal struct {
	l *loop.Loop
	n int
}

// Each loop gets its own value of a Local, made once however many
// goroutines ask at the same time; two Locals on one loop are apart; Get
// allocates nothing once the value exists.
func TestLocal(t *testing.T) {
	g := newGroup(t, loop.BackendEpoll, loop.WithLoops(2))
	var inits atomic.Int32
	a := loop.NewLocal(func(l *loop.Loop) *localVal {
		inits.Add(1)
		return &localVal{l: l, n: 1}
	})
	b := loop.NewLocal(func(l *loop.Loop) *localVal { return &localVal{l: l, n: 2} })
	for _, l := range []*loop.Loop{g.Loop(0), g.Loop(1)} {
		got := make([]*localVal, 16)
		var wg sync.WaitGroup
		for i := range got {
			wg.Add(1)
			go func() { defer wg.Done(); got[i] = a.Get(l) }()
		}
		wg.Wait()
		for i, v := range got {
			if v != got[0] || v.l != l || v.n != 1 {
				t.Fatalf("Get %d on %v: %+v, want the one value of %v", i, l, v, l)
			}
		}
		if v := b.Get(l); v.l != l || v.n != 2 {
			t.Fatalf("second Local on %v: %+v", l, v)
		}
		if n := testing.AllocsPerRun(100, func() { a.Get(l) }); n != 0 {
			t.Fatalf("Get allocates %.1f times", n)
		}
	}
	if a.Get(g.Loop(0)) == a.Get(g.Loop(1)) {
		t.Fatal("two loops share a value")
	}
	if n := inits.Load(); n != 2 {
		t.Fatalf("init ran %d times for 2 loops", n)
	}
}
