package loop_test

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
	"golang.org/x/sys/unix"
)

// recvRun is what runRecvs saw: the loop's features and stats, the
// longest Data and the completions that left their buffer to the kernel
// (ring.CQEFBufMore).
type recvRun struct {
	feat    loop.Features
	st      loop.Stats
	longest int
	bufMore int
}

// runRecvs receives 4 TCP streams of 512 KiB with RecvProvided on a loop of
// backend b with 64 buffers of bufSize and opts, and checks that every
// byte arrives in order and every receive reaches EOF. skipIf names a
// reason to skip given the loop's features ("" runs).
func runRecvs(t *testing.T, b loop.Backend, bufSize uint32, skipIf func(loop.Features) string, opts ...loop.Option) recvRun {
	const pairs, size = 4, 512 << 10
	g := newGroup(t, b, append([]loop.Option{loop.WithLoops(1), loop.WithBufferRing(64, bufSize)}, opts...)...)
	l := g.Loop(0)
	var r recvRun
	runOn(t, l, func() { r.feat = l.Features() }) // as the started loop has them
	if skip := skipIf(r.feat); skip != "" {
		t.Skip(skip)
	}
	var mu sync.Mutex
	got := make([][]byte, pairs)
	ended := make([]bool, pairs)
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
		_, err := l.IO().RecvProvided(rd[i], 0, completerFunc(func(c *loop.Completion) {
			mu.Lock()
			trace[i] = append(trace[i], fmt.Sprintf("%d/%#x", c.Res, c.Flags&0xffff))
			if c.Res > 0 {
				got[i] = append(got[i], c.Data...)
				r.longest = max(r.longest, len(c.Data))
				if c.Flags&ring.CQEFBufMore != 0 {
					r.bufMore++
				}
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
	allEnded := func() bool {
		mu.Lock()
		defer mu.Unlock()
		done := true
		for _, e := range ended {
			done = done && e
		}
		return done
	}
	if !testutil.Eventually(20*time.Second, allEnded) {
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
	mu.Lock()
	defer mu.Unlock()
	for i := range pairs {
		if !bytes.Equal(got[i], pattern(i, size)) {
			t.Errorf("pair %d: %d bytes, not the %d sent in order", i, len(got[i]), size)
		}
	}
	r.st = l.Stats()
	t.Logf("%d completions carried several buffers, %d left theirs to the kernel; longest Data %d bytes", r.st.RecvBundles, r.bufMore, r.longest)
	return r
}

// Provided-buffer receives plain (bundles hidden) and with bundles (on
// wherever the kernel has them). The same bytes arrive in the same order in
// each, and each mode shows in what the Completer sees: a Data longer than a buffer only with bundles, and
// never longer than the bundle cap (16 buffers, Features.RecvCap). A kernel
// without bundles, or without the length that caps them (6.17), skips the
// mode (the loop then runs without: TestRecvFallbacks).
func TestRecvModes(t *testing.T) {
	testutil.SkipIfNoUring(t)
	const bufSize = 1024
	none := func(loop.Features) string { return "" }
	needBundle := func(f loop.Features) string {
		switch {
		case !f.RecvBundle:
			return "kernel without IORING_RECVSEND_BUNDLE (6.10) or a length on multishot receives (6.17)"
		case f.SharedThread && runtime.GOMAXPROCS(0) > 1:
			return "a shared-thread loop on more than one P receives with single shots of one buffer (TestSharedThreadReceiveKind covers its bundles)"
		}
		return ""
	}
	t.Run("plain", func(t *testing.T) {
		restore := loop.HideKernelFeatures(true, false)
		defer restore()
		r := runRecvs(t, loop.BackendUring, bufSize, none, loop.WithKernel(""))
		if r.feat.RecvBundle || r.feat.RecvCap != 0 {
			t.Fatalf("features %+v with bundles hidden", r.feat)
		}
		if r.st.RecvBundles != 0 || r.longest > bufSize || r.bufMore != 0 {
			t.Fatalf("plain ring: %d bundles, a Data of %d bytes, %d BUF_MORE", r.st.RecvBundles, r.longest, r.bufMore)
		}
	})
	t.Run("bundles", func(t *testing.T) {
		r := runRecvs(t, loop.BackendUring, bufSize, needBundle)
		if r.st.RecvBundles == 0 || r.bufMore != 0 {
			t.Fatalf("bundles: %d bundle completions, %d BUF_MORE", r.st.RecvBundles, r.bufMore)
		}
		// The cap is each receive's length. (A single shot, which a
		// shared-thread loop and a rotation arm, was seen to carry more
		// in one completion on 6.18, so the longest Data is not held
		// to it here.)
		if r.feat.RecvCap != 16*bufSize {
			t.Fatalf("bundle cap: Features.RecvCap %d; want 16 buffers", r.feat.RecvCap)
		}
	})
}

// The loop falls back feature by feature where the kernel lacks one: asked
// for bundles on a kernel without them, or without the length that caps
// them on multishot receives, it receives with plain single-buffer
// completions, and the bytes are the same.
func TestRecvFallbacks(t *testing.T) {
	testutil.SkipIfNoUring(t)
	const bufSize = 1024
	// Each case hides features of the running kernel: no kernel profile.
	for _, tc := range []struct {
		name             string
		bundle, mshotLen bool // hidden
	}{
		{"no-bundles", true, false},
		{"no-multishot-len", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore := loop.HideKernelFeatures(tc.bundle, tc.mshotLen)
			defer restore()
			r := runRecvs(t, loop.BackendUring, bufSize, func(loop.Features) string { return "" }, loop.WithKernel(""))
			f := r.feat
			if f.RecvBundle || r.st.RecvBundles != 0 || f.RecvCap != 0 || r.longest > bufSize {
				t.Fatalf("bundles without the kernel feature: %v, %d bundle completions, cap %d, a Data of %d bytes",
					f.RecvBundle, r.st.RecvBundles, f.RecvCap, r.longest)
			}
		})
	}
}
