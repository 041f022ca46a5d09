package loop

// State is a loop's lifecycle state. The values are ordered, so checks read
// as comparisons (state >= StateShuttingDown), as in Netty's
// SingleThreadEventExecutor.
//
//	state             entered when                                 Execute   Schedule / ops
//	NotStarted   (1)  the loop is created                          starts it  starts it / -
//	Started      (2)  first Execute/Schedule… (CAS from 1)         accepted   accepted
//	ShuttingDown (3)  ShutdownGracefully (CAS from 2)              accepted   rejected / accepted
//	Shutdown     (4)  the quiet period ended or the timeout hit;   rejected   rejected
//	                  also 1→4 for a loop that never started
//	Terminated   (5)  ops reaped, driver closed; Done() closes     rejected   rejected
//
// Transitions only go up. A loop that never started skips 2 and 3: it has
// no task to run and nothing to be quiet about.
type State int32

const (
	StateNotStarted   State = 1 + iota // created, no goroutine yet
	StateStarted                       // the loop goroutine runs
	StateShuttingDown                  // graceful shutdown: quiet period, tasks still accepted
	StateShutdown                      // no task accepted; ops being canceled and reaped
	StateTerminated                    // everything released; Done() is closed
)

// String returns the state's name.
func (s State) String() string {
	switch s {
	case StateNotStarted:
		return "not-started"
	case StateStarted:
		return "started"
	case StateShuttingDown:
		return "shutting-down"
	case StateShutdown:
		return "shutdown"
	case StateTerminated:
		return "terminated"
	}
	return "unknown"
}
