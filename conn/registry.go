package conn

import (
	"net"
	"sync/atomic"

	"github.com/ringloop/ringloop/loop"
)

// Every open connection is tracked by its loop's registry, so that a group
// shutting down closes them at its first shutdown check (Netty's closeAll),
// not after the quiet period (docs/conn.md, "Closing").

// loopConns is one loop's open connections. Loop goroutine only, but for
// deadlines.
type loopConns struct {
	conns          connSet      // indexed by Conn.registryIndex
	closing        bool         // the loop's shutdown began: no connection joins
	kept           int          // bytes its connections keep as input (inbound.chargeKept)
	keepers        int          // connections keeping input
	outboundQueued int          // bytes its connections queue for sending, as of their last outbound.chargeOutbound
	queuers        int          // connections with bytes counted in outboundQueued
	pressureMark   atomic.Int64 // while outboundQueued passes the budget, the budget per queuer (outbound.highWaterNow); else 0
	budgetPaused   atomic.Int32 // connections paused by the loop's budget of kept bytes (inbound.overKeptBudget); written on the loop
	netKept        atomic.Int64 // bytes its NetConns received and no Read took yet (NetConn.took)
	resuming       bool         // resumeUnderBudget is running
	overloaded     atomic.Bool  // past twice its budget of kept or queued bytes, until back under the budget (checkOverload); read by acceptors
	loop           *loop.Loop

	// A NetConn Write sent from its goroutine since the loop last
	// delivered input to a NetConn (outbound.sendDirect): later Writes
	// queue, so the sends of many goroutines are batched by one wakeup.
	directSent atomic.Bool

	deadlines deadlineQueue // its NetConns' deadlines (safe for concurrent use)
	overflow  overflow      // tasks a full task queue refused, in order (executeRetrying)
}

// A connSet is a set of connections kept in fixed chunks, every connection
// holding its own 1-based index (0: not in the set): adding and removing
// are O(1), an entry costs one pointer, and chunks are never copied (a
// doubling slice would hold up to twice the room and leave garbage).
type connSet struct {
	chunks [][]*Conn // each of connChunk entries; the last one partly used
	n      int
}

// connChunk is the number of entries per chunk of a connSet.
const connChunk = 256

func (s *connSet) at(i int) **Conn { return &s.chunks[i/connChunk][i%connChunk] }

func (s *connSet) add(c *Conn) {
	if s.n == len(s.chunks)*connChunk {
		s.chunks = append(s.chunks, make([]*Conn, connChunk))
	}
	*s.at(s.n) = c
	s.n++
	c.registryIndex = int32(s.n)
}

// remove takes c out of the set and reports whether it was in it.
func (s *connSet) remove(c *Conn) bool {
	i := int(c.registryIndex) - 1
	if i < 0 || i >= s.n || *s.at(i) != c {
		return false
	}
	last := s.n - 1
	if i != last {
		moved := *s.at(last)
		*s.at(i) = moved
		moved.registryIndex = int32(i + 1)
	}
	*s.at(last) = nil
	s.n = last
	c.registryIndex = 0
	// Keep one empty chunk past the last used one, so that a connection
	// opening and closing at a chunk's edge does not make and drop it
	// each time; give back the others.
	if keep := s.n/connChunk + 2; len(s.chunks) > keep {
		clear(s.chunks[keep:])
		s.chunks = s.chunks[:keep]
	}
	return true
}

// snapshot returns a copy of the members, to iterate while they leave.
func (s *connSet) snapshot() []*Conn {
	out := make([]*Conn, 0, s.n)
	for i := range s.n {
		out = append(out, *s.at(i))
	}
	return out
}

// loopState is each loop's registry (set in init: its functions reach
// back to it).
var loopState *loop.Local[loopConns]

func init() { loopState = loop.NewLocal(newLoopConns) }

// newLoopConns makes l's registry, with the shutdown hook that closes its
// connections.
func newLoopConns(l *loop.Loop) *loopConns {
	r := &loopConns{deadlines: deadlineQueue{l: l}, loop: l}
	if _, err := l.AddShutdownHook(func() { r.closeAll() }); err != nil {
		r.closing = true // shutting down already: nothing joins
	}
	r.startResetSweep(l)
	return r
}

// registryFor returns l's registry. The connection registry in it is used
// on l only; its deadline queue anywhere.
func registryFor(l *loop.Loop) *loopConns { return loopState.Get(l) }

// track adds c to its loop's registry and reports false if the loop is
// shutting down. Must be called on c's loop.
func (c *lifecycle) track() bool {
	if c.l.State() >= loop.StateShuttingDown {
		return false
	}
	r := registryFor(c.l)
	if r.closing {
		return false
	}
	r.conns.add(c.conn())
	return true
}

// untrack removes c from its loop's registry. Must be called on c's loop.
func (c *lifecycle) untrack() {
	registryFor(c.l).conns.remove(c.conn())
}

// closeAll closes every connection of its loop as the loop's shutdown
// begins. On the loop.
func (r *loopConns) closeAll() {
	r.closing = true
	for _, c := range r.conns.snapshot() {
		c.lifecycle().closeForShutdown()
	}
}

// closeForShutdown closes c because its loop is shutting down: as Close
// (queued bytes linger), but OnClose reports net.ErrClosed. Must be called
// on c's loop.
func (c *lifecycle) closeForShutdown() {
	c.flags.set(flagClosedByShutdown)
	// As Close on the loop, even if a Close came first: its task may
	// still be on its way (retried after a full task queue), and the loop
	// is going away.
	c.shared.set(sharedCloseRequested)
	c.mu.Lock()
	c.shared.set(sharedWritesClosed)
	c.conn().wakeRoomWaiters()
	c.mu.Unlock()
	c.closeLinger()
	if c.flags.has(flagLingering) && c.ensureExtras().terminationHold == nil {
		// Lingering since before the shutdown: the loop's shutdown stops
		// its linger timer, so it holds the loop's termination instead,
		// until its queue drains or the shutdown's timeout passes.
		c.extras.terminationHold = c.l.DelayTermination(c.cfg.linger)
	}
}

// errLoopShutdown is what OnClose reports for a connection closed by its
// loop's shutdown.
func (c *lifecycle) errLoopShutdown() error { return c.conn().opError("close", "", net.ErrClosed) }
