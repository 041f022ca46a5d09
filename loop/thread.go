package loop

import "runtime"

// Shared-thread loops (WithSharedThread).
//
// A locked loop owns its OS thread for life, so the thread id identifies the
// loop goroutine (InLoop, Current). A shared-thread loop holds a thread only
// while it runs a turn: before it may park on the netpoller it unlocks the
// thread and forgets its id (tid 0: nothing on that thread is "in the loop"
// while other goroutines run there), and when it runs again it locks the
// thread it resumed on and records that id. The running map names the last
// loop that ran on each thread (two shared-thread loops may take turns on
// one); Current checks that the loop still claims the thread.

// parkThread is the park hook of a shared-thread loop.
func (l *Loop) parkThread() {
	l.tid.Store(0)
	runtime.UnlockOSThread()
}

// resumeThread is the resume hook of a shared-thread loop. The entries of
// the threads it left stay (Current ignores them: the loop no longer claims
// those threads), so a loop moving between the same few threads adds none
// and allocates nothing per wait; it keeps the last sharedTids of them and
// removes its entries when it ends.
func (l *Loop) resumeThread() {
	runtime.LockOSThread()
	tid := gettid()
	l.lastTid = tid
	// New to this thread, or another shared-thread loop ran on it since
	// this one did and took its entry.
	if v, ok := running.Load(tid); !ok || v.(*Loop) != l {
		running.Store(tid, l)
		l.rememberTid(tid)
	}
	l.tid.Store(tid)
}

// sharedTids bounds the thread entries a shared-thread loop keeps.
const sharedTids = 16

// rememberTid notes tid among the threads l has an entry for, dropping the
// oldest entry past sharedTids.
func (l *Loop) rememberTid(tid int32) {
	for _, t := range l.tids {
		if t == tid {
			return
		}
	}
	if len(l.tids) == sharedTids {
		running.CompareAndDelete(l.tids[0], l)
		l.tids = append(l.tids[:0], l.tids[1:]...)
	}
	l.tids = append(l.tids, tid)
}

// forgetTids removes every thread entry of l (at termination).
func (l *Loop) forgetTids() {
	for _, t := range l.tids {
		running.CompareAndDelete(t, l)
	}
	l.tids = nil
	running.CompareAndDelete(l.lastTid, l)
}
