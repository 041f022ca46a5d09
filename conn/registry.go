package conn

import (
	"net"
	"sync"

	"github.com/ringloop/ringloop/loop"
)

// Every open connection is tracked by its loop's registry, so that a group
// shutting down closes them at its first shutdown check (Netty's closeAll)
// instead of serving them through the quiet period: a connection with
// queued bytes lingers for them (WithLinger), then OnClose reports an error
// wrapping net.ErrClosed. A connection that would open on a loop already
// shutting down is closed at once.

// loopConns is one loop's open connections. Loop goroutine only.
type loopConns struct {
	conns   map[*Conn]struct{}
	closing bool // the loop's shutdown began: no connection joins
}

// registries maps a loop to its *loopConns.
var registries sync.Map

// registryFor returns l's registry, creating it (and the shutdown hook that
// closes its connections) on first use. Must be called on l.
func registryFor(l *loop.Loop) *loopConns {
	if r, ok := registries.Load(l); ok {
		return r.(*loopConns)
	}
	r := &loopConns{conns: make(map[*Conn]struct{})}
	registries.Store(l, r)
	if _, err := l.AddShutdownHook(func() { r.closeAll(l) }); err != nil {
		// Shutting down already: nothing joins.
		r.closing = true
		registries.Delete(l)
	}
	return r
}

// track adds c to its loop's registry and reports false if the loop is
// shutting down. Must be called on c's loop.
func (c *Conn) track() bool {
	if c.l.State() >= loop.StateShuttingDown {
		return false
	}
	r := registryFor(c.l)
	if r.closing {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

// untrack removes c from its loop's registry. Must be called on c's loop.
func (c *Conn) untrack() {
	if r, ok := registries.Load(c.l); ok {
		delete(r.(*loopConns).conns, c)
	}
}

// closeAll closes every connection of l as its shutdown begins.
func (r *loopConns) closeAll(l *loop.Loop) {
	r.closing = true
	registries.Delete(l)
	for c := range r.conns {
		c.closeForShutdown()
	}
}

// closeForShutdown closes c because its loop is shutting down: as Close
// (queued bytes linger), but OnClose reports net.ErrClosed. Must be called
// on c's loop.
func (c *Conn) closeForShutdown() {
	c.shutdownClose = true
	_ = c.Close() // on the loop: closeLinger; an error only says Close came first
}

// errLoopShutdown is what OnClose reports for a connection closed by its
// loop's shutdown.
func (c *Conn) errLoopShutdown() error { return c.opError("close", "", net.ErrClosed) }
