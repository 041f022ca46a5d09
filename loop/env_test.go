package loop_test

import (
	"bytes"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ringloop/ringloop/loop"
)

// TestParseEnv checks what RINGLOOP's value sets and which items it
// reports as problems.
func TestParseEnv(t *testing.T) {
	for _, tc := range []struct {
		in       string
		shared   bool
		kernel   string
		problems []string // substrings, one per problem, in order
	}{
		{in: ""},
		{in: "thread=shared", shared: true},
		{in: "thread=locked"},
		{in: "kernel=6.1", kernel: "6.1"},
		{in: "kernel=6.1.0-18-amd64", kernel: "6.1.0-18-amd64"},
		{in: "thread=shared,kernel=6.1", shared: true, kernel: "6.1"},
		{in: " thread = shared , kernel= 6.1 ", shared: true, kernel: "6.1"},
		{in: ",,thread=shared,", shared: true},
		{in: "thread=shared,thread=locked"}, // the later wins
		{in: "thread=spare", problems: []string{"thread=spare"}},
		{in: "kernel=6.x", problems: []string{"kernel=6.x"}},
		{in: "wait=netpoll,thread=shared", shared: true, problems: []string{"wait=netpoll: unknown key"}},
		{in: "shared", problems: []string{"shared: expected key=value"}},
		{in: "THREAD=shared", problems: []string{"THREAD=shared: unknown key"}},
		{in: "thread=shared,kernel=5", shared: true, problems: []string{"kernel=5"}},
	} {
		shared, kernel, problems := loop.ParseEnv(tc.in)
		if shared != tc.shared || kernel != tc.kernel {
			t.Errorf("RINGLOOP=%q: shared %v, kernel %q; want %v, %q", tc.in, shared, kernel, tc.shared, tc.kernel)
		}
		if len(problems) != len(tc.problems) {
			t.Errorf("RINGLOOP=%q: problems %q, want %d", tc.in, problems, len(tc.problems))
			continue
		}
		for i, p := range problems {
			if !strings.HasPrefix(p, "RINGLOOP: ignoring ") || !strings.Contains(p, tc.problems[i]) {
				t.Errorf("RINGLOOP=%q: problem %q, want one naming %q", tc.in, p, tc.problems[i])
			}
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the loops' logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// envTestRuns numbers the runs of TestEnvProblemsLoggedOnce in this process.
var envTestRuns atomic.Int32

// A bad RINGLOOP is reported through the group's logger, at Warn, once
// per process however many groups meet it, and never fails NewGroup; the
// settings it gets right still apply.
func TestEnvProblemsLoggedOnce(t *testing.T) {
	// Values no other test, and no earlier run of this one (-count), uses:
	// each problem is reported once per process.
	run := strconv.Itoa(int(envTestRuns.Add(1)))
	bad, unknown := "kernel="+t.Name()+run, "x"+t.Name()+run+"=1"
	t.Setenv("RINGLOOP", "thread=shared,"+bad+","+unknown)
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for range 3 {
		g, err := loop.NewGroup(loop.WithBackend(loop.BackendEpoll), loop.WithLoops(1), loop.WithLogger(log))
		if err != nil {
			t.Fatalf("NewGroup under a bad RINGLOOP: %v", err)
		}
		if !g.Loop(0).Features().SharedThread {
			t.Error("thread=shared beside a bad item did not apply")
		}
		shutdown(t, g)
	}
	lines := slices.DeleteFunc(strings.Split(out.String(), "\n"), func(l string) bool { return l == "" })
	var kernel, other int
	for _, l := range lines {
		switch {
		case !strings.Contains(l, "level=WARN"):
			t.Errorf("logged below Warn: %s", l)
		case strings.Contains(l, bad):
			kernel++
		case strings.Contains(l, unknown):
			other++
		}
	}
	if kernel != 1 {
		t.Errorf("the bad kernel value was logged %d times in 3 groups, want once:\n%s", kernel, out.String())
	}
	if other != 1 {
		t.Errorf("the unknown key was logged %d times in 3 groups, want once:\n%s", other, out.String())
	}
}

// RINGLOOP=thread=shared makes shared threads the default, on both
// backends; an option still wins over it.
func TestEnvSharedThread(t *testing.T) {
	t.Setenv("RINGLOOP", "thread=shared")
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b, loop.WithLoops(1))
		if !g.Loop(0).Features().SharedThread {
			t.Fatal("RINGLOOP=thread=shared: Features().SharedThread false")
		}
		runOn(t, g.Loop(0), func() {})
		g = newGroup(t, b, loop.WithLoops(1), loop.WithSharedThread(false))
		if g.Loop(0).Features().SharedThread {
			t.Fatal("WithSharedThread(false) under RINGLOOP=thread=shared: Features().SharedThread true")
		}
	})
	t.Setenv("RINGLOOP", "thread=locked")
	g := newGroup(t, loop.BackendEpoll, loop.WithLoops(1))
	if g.Loop(0).Features().SharedThread {
		t.Fatal("RINGLOOP=thread=locked: Features().SharedThread true")
	}
}
