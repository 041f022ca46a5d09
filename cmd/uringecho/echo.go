package main

import (
	"sync/atomic"

	"github.com/ringloop/ringloop/conn"
)

// echo writes every byte it receives back to its sender. It counts bytes per
// loop, on a cache line of its own, so loops never contend on a counter.
type echo struct {
	conn.NopHandler
	perLoop []loopCount // indexed by Loop.Index
}

type loopCount struct {
	bytes atomic.Uint64
	_     [56]byte // keep each loop's counter on its own cache line
}

func newEcho(loops int) *echo { return &echo{perLoop: make([]loopCount, loops)} }

// OnData runs on c's loop: Write copies data, which is only valid during the
// call, into c's outbound buffer.
func (e *echo) OnData(c *conn.Conn, data []byte) {
	if _, err := c.Write(data); err == nil {
		e.perLoop[c.Loop().Index()].bytes.Add(uint64(len(data)))
	}
}

// total returns the bytes echoed so far over every loop. Safe for concurrent use.
func (e *echo) total() uint64 {
	var n uint64
	for i := range e.perLoop {
		n += e.perLoop[i].bytes.Load()
	}
	return n
}
