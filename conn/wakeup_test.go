package conn

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
)

// blockInWait waits on w, then closes done (a goroutine blocked in the wait
// shows this function on its stack).
func blockInWait(w *wakeup, done chan struct{}) {
	w.wait(new(atomic.Int32))
	close(done)
}

// TestWakeup checks the NetConn's wakeup: a signal left before the wait is
// taken at once, signals never pile up (a second one while one is pending
// is dropped, and never unlocks the Mutex twice, which would be fatal), a
// wait blocks until a signal, and a waiter looping on a state that many
// goroutines change and signal never misses the last change.
func TestWakeup(t *testing.T) {
	var w wakeup
	w.init()

	w.signal()
	w.signal() // pending already: dropped
	done := make(chan struct{})
	go func() { w.wait(new(atomic.Int32)); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a pending wakeup was not taken")
	}

	done = make(chan struct{})
	go blockInWait(&w, done)
	testutil.WaitParked(t, 10*time.Second, "conn.blockInWait", 1)
	select {
	case <-done:
		t.Fatal("wait returned with no wakeup pending")
	default:
	}
	w.signal()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a signal did not end the wait")
	}

	// Producers bump a counter under a lock and signal; the consumer
	// checks the counter under the lock and waits only while it has not
	// seen every bump.
	const producers, bumps = 8, 2000
	var (
		mu    sync.Mutex
		count int
		waits atomic.Int64
	)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < bumps; i++ {
				mu.Lock()
				count++
				mu.Unlock()
				w.signal()
			}
		}()
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			mu.Lock()
			n := count
			mu.Unlock()
			if n == producers*bumps {
				return
			}
			w.wait(new(atomic.Int32))
			waits.Add(1)
		}
	}()
	select {
	case <-finished:
	case <-time.After(20 * time.Second):
		mu.Lock()
		n := count
		mu.Unlock()
		t.Fatalf("consumer stuck: saw %d of %d bumps after %d waits", n, producers*bumps, waits.Load())
	}
	wg.Wait()
}
