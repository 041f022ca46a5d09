package conn_test

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// With a CQ of 8 entries (an SQ of 4) and 64 clients echoing at once, the
// kernel runs out of room in the CQ over and over: the loop's Stats show
// it, and every byte still comes back, since the kernel keeps the
// completions that did not fit (IORING_FEAT_NODROP) until the loop takes
// them.
func TestCQOverflowEcho(t *testing.T) {
	g := ctGroup(t, loop.BackendUring, 1, loop.WithRingEntries(4))
	h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
	s := ctListen(t, "tcp", "127.0.0.1:0", g, h)

	// Rounds of 64 clients echoing at once, until the CQ has overflowed
	// (most first rounds do), at most 20.
	for round := 0; round < 20 && g.Stats().Total.CQOverflows == 0; round++ {
		echoBurst(t, s.Addr().String(), 64, 64<<10)
	}
	st := g.Stats().Total
	t.Logf("%d polls found the CQ overflowed; %d completions lost", st.CQOverflows, st.LostCompletions)
	if st.LostCompletions != 0 {
		t.Fatalf("%d completions lost", st.LostCompletions)
	}
	if st.CQOverflows == 0 {
		t.Fatal("the CQ never overflowed: the test does not exercise the overflow path")
	}
}

// echoBurst has clients clients echo size random bytes each through addr
// at once, and fails on any difference.
func echoBurst(t *testing.T, addr string, clients, size int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(30 * time.Second))
			msg := make([]byte, size)
			rand.Read(msg)
			werr := make(chan error, 1)
			go func() { _, err := nc.Write(msg); werr <- err }()
			got := make([]byte, size)
			if _, err := io.ReadFull(nc, got); err != nil {
				errs <- err
				return
			}
			if err := <-werr; err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(got, msg) {
				errs <- io.ErrUnexpectedEOF
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("client: %v", err)
	}
}
