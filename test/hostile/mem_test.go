package hostile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

var logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// backends runs f once per backend as "backend=uring" and "backend=epoll";
// uring is skipped where io_uring is refused.
func backends(t *testing.T, f func(t *testing.T, b loop.Backend)) {
	t.Helper()
	for _, b := range []loop.Backend{loop.BackendUring, loop.BackendEpoll} {
		t.Run("backend="+b.String(), func(t *testing.T) {
			if b == loop.BackendUring {
				testutil.SkipIfNoUring(t)
			}
			testutil.Watchdog(t, 180*time.Second)
			f(t, b)
		})
	}
}

// newGroup makes a group on backend b with default options but the
// backend, the loop count and a quiet logger, shut down when the test ends.
func newGroup(tb testing.TB, b loop.Backend, loops int) *loop.Group {
	tb.Helper()
	g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(loops), loop.WithLogger(logger))
	if err != nil {
		if b == loop.BackendUring && errors.Is(err, ring.ErrNotSupported) {
			tb.Skipf("io_uring unavailable: %v", err)
		}
		tb.Fatalf("NewGroup: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			tb.Errorf("group Shutdown: %v", err)
		}
	})
	return g
}

// rssSlack is what the resident set may grow beyond the heap: the runtime's
// own memory, goroutine stacks, freed pages not yet returned.
const rssSlack = 64 << 20

// scale returns full, or short under testing.Short().
func scale(full, short int) int {
	if testing.Short() {
		return short
	}
	return full
}

// A memWatch records the peak Go heap and the peak resident set of the
// process while an attack runs, above what they were when it started.
type memWatch struct {
	baseHeap, baseRSS uint64
	stop              chan struct{}
	done              sync.WaitGroup
	mu                sync.Mutex
	peakHeap          uint64
	samples           int
}

// watchMem collects garbage, resets the process's peak RSS and starts
// sampling the live heap every 20 ms.
func watchMem(tb testing.TB) *memWatch {
	tb.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		tb.Logf("cannot reset the peak RSS (%v): the RSS bound covers the whole test", err)
	}
	w := &memWatch{baseHeap: heapLive(), baseRSS: procStatus("VmRSS"), stop: make(chan struct{})}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *memWatch) sample() {
	h := heapLive()
	w.mu.Lock()
	w.peakHeap = max(w.peakHeap, h)
	w.samples++
	w.mu.Unlock()
}

// sampled returns how many samples the watch took.
func (w *memWatch) sampled() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples
}

// end stops sampling and returns the peak heap and the peak RSS above the
// start, in bytes.
func (w *memWatch) end() (heap, rss uint64) {
	w.sample()
	close(w.stop)
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return sub(w.peakHeap, w.baseHeap), sub(procStatus("VmHWM"), w.baseRSS)
}

// check stops the watch and fails tb if the peak heap or the peak RSS
// grew by more than the bounds; it logs both either way.
//
// Under the race detector the bounds are doubled (heap) and tripled (RSS):
// its shadow memory and larger allocations grow with the heap they watch.
func (w *memWatch) check(tb testing.TB, what string, maxHeap, maxRSS uint64) {
	tb.Helper()
	maxHeap, maxRSS = raceScaled(maxHeap, maxRSS)
	heap, rss := w.end()
	tb.Logf("%s: peak heap +%s (bound %s), peak RSS +%s (bound %s)", what, mib(heap), mib(maxHeap), mib(rss), mib(maxRSS))
	if heap > maxHeap {
		tb.Errorf("%s: the Go heap grew by %s, more than %s", what, mib(heap), mib(maxHeap))
	}
	if rss > maxRSS {
		tb.Errorf("%s: the resident set grew by %s, more than %s", what, mib(rss), mib(maxRSS))
	}
}

// raceScaled widens memory bounds under the race detector: its shadow
// memory grows the resident set with the heap, and its allocations are
// larger.
func raceScaled(maxHeap, maxRSS uint64) (uint64, uint64) {
	if raceOn {
		return 2 * maxHeap, 3 * maxRSS
	}
	return maxHeap, maxRSS
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

func mib(n uint64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB" }

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

var heapMu sync.Mutex

// heapLive returns the bytes of heap objects, live or not yet swept.
func heapLive() uint64 {
	heapMu.Lock()
	defer heapMu.Unlock()
	metrics.Read(heapSample)
	return heapSample[0].Value.Uint64()
}

// procStatus returns a kB field of /proc/self/status in bytes.
func procStatus(field string) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte(field+":")) {
			continue
		}
		f := bytes.Fields(line[len(field)+1:])
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.ParseUint(string(f[0]), 10, 64)
		return n << 10
	}
	return 0
}

// TestMemWatchSees checks the watch itself: 64 MiB held and touched during
// the watch shows in the heap figure, and most of it in the RSS one.
func TestMemWatchSees(t *testing.T) {
	w := watchMem(t)
	b := make([]byte, 64<<20)
	for i := range b {
		if i%4096 == 0 {
			b[i] = 1
		}
	}
	n := w.sampled()
	testutil.WaitFor(t, 10*time.Second, "two samples of the watch's own", func() bool { return w.sampled() >= n+2 })
	heap, rss := w.end()
	runtime.KeepAlive(b)
	// The heap may place part of it in pages already resident (freed by
	// earlier tests and not yet given back), so the RSS sees less.
	if heap < 60<<20 || rss < 24<<20 {
		t.Fatalf("64 MiB held: the watch saw heap +%s, RSS +%s", mib(heap), mib(rss))
	}
}
