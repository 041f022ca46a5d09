package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Resources is what a test must give back: open fds, io_uring mappings
// and goroutines.
type Resources struct {
	Fds        map[int]string    // fd → readlink of /proc/self/fd/N
	UringMaps  []string          // /proc/self/maps lines of io_uring regions
	Goroutines map[string]string // goroutine id → first frame
}

// Snapshot records the process's fds, io_uring mappings and goroutines.
func Snapshot() Resources {
	return Resources{Fds: openFds(), UringMaps: MapsLines("io_uring"), Goroutines: goroutines()}
}

// openFds lists /proc/self/fd, leaving out the fd used to read it.
func openFds() map[int]string {
	fds := make(map[int]string)
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fds
	}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory fd itself, already closed
		}
		fds[n] = target
	}
	return fds
}

// FdCount returns the number of open fds of the process.
func FdCount() int { return len(openFds()) }

// MapsLines returns the lines of /proc/self/maps that contain substr
// ("io_uring" matches the SQ/CQ/SQE regions, shown as anon_inode:[io_uring]).
func MapsLines(substr string) []string {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// Mapped reports whether addr falls inside any mapping of the process.
func Mapped(addr uintptr) bool {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rng, _, _ := strings.Cut(sc.Text(), " ")
		lo, hi, ok := strings.Cut(rng, "-")
		if !ok {
			continue
		}
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && uint64(addr) >= l && uint64(addr) < h {
			return true
		}
	}
	return false
}

// goroutines returns every goroutine but the caller, by id, with its
// top frame, parsed from runtime.Stack (goleak's approach).
func goroutines() map[string]string {
	out := make(map[string]string)
	blocks := bytes.Split(AllStacks(), []byte("\n\n"))
	for i, blk := range blocks {
		if i == 0 {
			continue // the calling goroutine is always printed first
		}
		lines := strings.SplitN(string(blk), "\n", 3)
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		id := strings.Fields(lines[0])[1]
		out[id] = strings.TrimSpace(lines[1])
	}
	return out
}

// ignoredGoroutine reports goroutines the runtime or the testing package
// start lazily and keep for the life of the process.
func ignoredGoroutine(top string) bool {
	for _, s := range []string{"os/signal.", "runtime.ensureSigM", "testing.(*M).", "testing.tRunner", "testing.runTests"} {
		if strings.Contains(top, s) {
			return true
		}
	}
	return false
}

// Leaks compares s (taken before) with the process now and describes what
// was not given back, or returns "" when nothing leaked. Goroutines are
// given until wait to exit.
func (s Resources) Leaks(wait time.Duration) string {
	deadline := time.Now().Add(wait)
	for {
		now := Snapshot()
		var b strings.Builder
		var fds []int
		for fd, target := range now.Fds {
			if _, ok := s.Fds[fd]; !ok {
				fds = append(fds, fd)
			} else if s.Fds[fd] != target {
				fds = append(fds, fd)
			}
		}
		sort.Ints(fds)
		for _, fd := range fds {
			fmt.Fprintf(&b, "leaked fd %d -> %s\n", fd, now.Fds[fd])
		}
		if len(now.UringMaps) > len(s.UringMaps) {
			fmt.Fprintf(&b, "io_uring mappings: %d before, %d after:\n%s\n",
				len(s.UringMaps), len(now.UringMaps), strings.Join(now.UringMaps, "\n"))
		}
		for id, top := range now.Goroutines {
			if _, ok := s.Goroutines[id]; !ok && !ignoredGoroutine(top) {
				fmt.Fprintf(&b, "leaked goroutine %s at %s\n", id, top)
			}
		}
		if b.Len() == 0 || time.Now().After(deadline) {
			return b.String()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CheckLeaks fails tb if, when the test ends, fds, io_uring mappings or
// goroutines remain that were not there when CheckLeaks was called.
// Register it before the test's own cleanups, which run first.
func CheckLeaks(tb testing.TB) {
	tb.Helper()
	before := Snapshot()
	tb.Cleanup(func() {
		if msg := before.Leaks(2 * time.Second); msg != "" {
			tb.Errorf("leak check:\n%s", msg)
		}
	})
}

// RunMain runs m, then fails the test binary (returns non-zero) if fds,
// io_uring mappings or goroutines leaked across the whole run (cf. cilium's
// testmain). Use it as:
//
//	func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }
func RunMain(m *testing.M) int {
	// Start the runtime's network poller (its epoll fd and eventfd stay
	// open for the life of the process) before taking the snapshot.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		ln.Close()
	}
	before := Snapshot()
	code := m.Run()
	if msg := before.Leaks(5 * time.Second); msg != "" {
		fmt.Fprintf(os.Stderr, "testutil.RunMain: resources leaked by the tests:\n%s", msg)
		if code == 0 {
			code = 1
		}
	}
	return code
}
