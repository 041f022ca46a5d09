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

// resumeThread is the resume hook of a shared-thread loop.
func (l *Loop) resumeThread() {
	runtime.LockOSThread()
	tid := gettid()
	if tid != l.lastTid {
		running.CompareAndDelete(l.lastTid, l)
		l.lastTid = tid
	}
	// Another shared-thread loop may have run on this thread since this
	// one last did, and taken its entry.
	if v, ok := running.Load(tid); !ok || v.(*Loop) != l {
		running.Store(tid, l)
	}
	l.tid.Store(tid)
}
