package loop

import (
	"runtime"
	"sync/atomic"
)

// Shared-thread loops (WithSharedThread).
//
// A locked loop owns its OS thread for life, so the thread id identifies the
// loop goroutine (InLoop, Current). A shared-thread loop holds a thread only
// while it runs a turn: before it may park on the netpoller it unlocks the
// thread and forgets its id (id 0: nothing on that thread is "in the loop"
// while other goroutines run there), and when it runs again it locks the
// thread it resumed on and records that id. The running map names the last
// loop that ran on each thread (two shared-thread loops may take turns on
// one); Current checks that the loop still claims the thread.

// loopThread is the OS thread a loop runs on: its id while the loop runs
// there, and the entries the loop has in running.
type loopThread struct {
	l       *Loop
	id      atomic.Int32 // the loop thread's id while it runs, else 0
	lastID  int32        // the thread the loop last ran on, as recorded in running
	entries []int32      // a shared-thread loop: the threads it has an entry in running for
}

// enter records the calling thread, locked by the loop goroutine as it
// starts, as the loop's.
func (t *loopThread) enter() {
	t.lastID = gettid()
	t.id.Store(t.lastID)
	running.Store(t.lastID, t.l)
}

// pinnedHere reports whether the caller is the loop's goroutine, for a
// shared-thread loop. Its thread is shared: another goroutine may have run
// on it a moment ago and moved since, so a thread id read unpinned may be
// stale. Pinned to its thread, the caller's id is exact, and a loop that
// holds the thread now (id set while it runs) leaves no room on it for
// any other goroutine.
func (t *loopThread) pinnedHere() bool {
	if t.id.Load() == 0 {
		// Not running a turn: no caller is the loop goroutine (which
		// asks only from within a turn), and no system call is needed.
		return false
	}
	runtime.LockOSThread()
	tid := gettid()
	ok := tid != 0 && t.id.Load() == tid
	runtime.UnlockOSThread()
	return ok
}

// park is the park hook of a shared-thread loop.
func (t *loopThread) park() {
	t.id.Store(0)
	runtime.UnlockOSThread()
}

// resume is the resume hook of a shared-thread loop. The entries of the
// threads it left stay (Current ignores them: the loop no longer claims
// those threads), so a loop moving between the same few threads adds none
// and allocates nothing per wait; it keeps the last sharedThreadEntries of
// them and removes its entries when it ends.
func (t *loopThread) resume() {
	runtime.LockOSThread()
	tid := gettid()
	t.lastID = tid
	// New to this thread, or another shared-thread loop ran on it since
	// this one did and took its entry.
	if v, ok := running.Load(tid); !ok || v.(*Loop) != t.l {
		running.Store(tid, t.l)
		t.remember(tid)
	}
	t.id.Store(tid)
}

// sharedThreadEntries bounds the thread entries a shared-thread loop keeps.
const sharedThreadEntries = 16

// remember notes tid among the threads the loop has an entry for, dropping
// the oldest entry past sharedThreadEntries.
func (t *loopThread) remember(tid int32) {
	for _, e := range t.entries {
		if e == tid {
			return
		}
	}
	if len(t.entries) == sharedThreadEntries {
		running.CompareAndDelete(t.entries[0], t.l)
		t.entries = append(t.entries[:0], t.entries[1:]...)
	}
	t.entries = append(t.entries, tid)
}

// leave removes every thread entry of the loop and forgets its thread (at
// termination).
func (t *loopThread) leave() {
	for _, e := range t.entries {
		running.CompareAndDelete(e, t.l)
	}
	t.entries = nil
	running.CompareAndDelete(t.lastID, t.l)
	t.id.Store(0)
}
