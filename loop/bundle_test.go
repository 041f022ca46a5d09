package loop_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// Provided-buffer receives with and without bundles (WithRecvBundles): the
// same bytes in the same order either way; with bundles on a kernel that
// has them, completions carry several buffers (as one Data longer than a
// buffer, or as one completion per buffer), without them never.
func TestRecvBundles(t *testing.T) {
	testutil.SkipIfNoUring(t)
	for _, on := range []bool{true, false} {
		name := map[bool]string{true: "bundles", false: "no-bundles"}[on]
		t.Run(name, func(t *testing.T) {
			const pairs, size, bufSize = 4, 512 << 10, 1024
			g := newGroup(t, loop.BackendUring, loop.WithLoops(1), loop.WithBufferRing(64, bufSize), loop.WithRecvBundles(on))
			l := g.Loop(0)
			if on && !l.Features().RecvBundle {
				t.Skip("kernel without IORING_RECVSEND_BUNDLE (6.10)")
			}
			if !on && l.Features().RecvBundle {
				t.Fatal("Features.RecvBundle with WithRecvBundles(false)")
			}
			var mu sync.Mutex
			got := make([][]byte, pairs)
			ended := make([]bool, pairs)
			longest := 0
			trace := make([][]string, pairs)
			var rd, wr []int
			// TCP: over AF_UNIX a multishot receive can miss the peer's
			// shutdown (RecvProvidedOnce).
			for range pairs {
				client, server := testutil.TCPPair(t)
				unix.SetNonblock(server, true)
				unix.SetNonblock(client, false)
				rd, wr = append(rd, server), append(wr, client)
			}
			var writers sync.WaitGroup
			t.Cleanup(func() { // before testutil's, which close the fds
				shutdown(t, g)
				for i := range rd {
					unix.Shutdown(rd[i], unix.SHUT_RDWR)
				}
				writers.Wait()
			})
			var arm func(i int)
			arm = func(i int) {
				_, err := l.RecvProvided(rd[i], 0, completerFunc(func(c *loop.Completion) {
					mu.Lock()
					trace[i] = append(trace[i], fmt.Sprintf("%d/%#x", c.Res, c.Flags&0xffff))
					if c.Res > 0 {
						got[i] = append(got[i], c.Data...)
						longest = max(longest, len(c.Data))
					}
					final := c.Flags&ring.CQEFMore == 0
					res := c.Res
					mu.Unlock()
					switch {
					case final && res > 0:
						arm(i)
					case final:
						mu.Lock()
						ended[i] = true
						mu.Unlock()
					}
				}))
				if err != nil {
					t.Errorf("RecvProvided: %v", err)
				}
			}
			runOn(t, l, func() {
				for i := range rd {
					arm(i)
				}
			})
			for i := range wr {
				writers.Add(1)
				go func() {
					defer writers.Done()
					p := pattern(i, size)
					for len(p) > 0 {
						k, err := unix.Write(wr[i], p)
						if err != nil {
							return
						}
						p = p[k:]
					}
					unix.Shutdown(wr[i], unix.SHUT_WR)
				}()
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				mu.Lock()
				done := true
				for _, e := range ended {
					done = done && e
				}
				mu.Unlock()
				if done {
					break
				}
				if time.Now().After(deadline) {
					mu.Lock()
					var lens []int
					for i := range got {
						lens = append(lens, len(got[i]))
					}
					mu.Unlock()
					var parked []loop.OpID
					var inFlight int
					var live []string
					runOn(t, l, func() { parked, inFlight, live = l.ParkedOps(), l.OpsInFlight(), l.LiveOps() })
					t.Logf("live ops: %v; fds %v", live, rd)
					for i := range trace {
						if !ended[i] {
							tr := trace[i]
							t.Logf("pair %d: %d completions, last %v", i, len(tr), tr[max(0, len(tr)-8):])
						}
					}
					st := l.Stats()
					t.Fatalf("receives did not end: received %v of %d each, ended %v; %d parked now (%d parkings), %d ops in flight; stale %d misuse %d lost %d", lens, size, ended, len(parked), st.ParkedRecvs, inFlight, st.StaleCompletions, st.BufferMisuse, st.LostCompletions)
				}
				time.Sleep(time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range pairs {
				if !bytes.Equal(got[i], pattern(i, size)) {
					t.Errorf("pair %d: %d bytes, not the %d sent in order", i, len(got[i]), size)
				}
			}
			st := l.Stats()
			t.Logf("%d completions carried several buffers; longest Data %d bytes", st.RecvBundles, longest)
			switch {
			case on && st.RecvBundles == 0:
				t.Fatal("no completion carried several buffers")
			case !on && (st.RecvBundles != 0 || longest > bufSize):
				t.Fatalf("without bundles: %d bundle completions, a Data of %d bytes", st.RecvBundles, longest)
			}
		})
	}
}
