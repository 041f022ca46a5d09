package conn

import (
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/ringloop/ringloop/loop"
	"golang.org/x/sys/unix"
)

// The send path. Write copies into the outbound chunkQueue under c.mu and
// queues one flush tail task per loop turn (flushQueued deduplicates it);
// the flush submits one SEND or SENDMSG of up to maxSendIov ranges. One
// send is in flight per connection; its completion consumes what was sent
// and submits the next, so a short write continues where it stopped.
//
// Writers only ever append to the last chunk, and a chunk that is not last
// never changes again: a send covers whole frozen chunks plus a prefix of
// the last one, so writers appending behind that prefix while the kernel
// reads it never overlap it.

const (
	// chunkSize is the outbound chunk size. 16 KiB keeps a small echo in
	// one chunk and a large write in few iovecs (hard-coded).
	chunkSize = 16 << 10
	// maxSendIov bounds the ranges one SENDMSG gathers (1 MiB of chunks;
	// the kernel's UIO_MAXIOV is 1024).
	maxSendIov = 64
)

type chunk struct {
	buf  []byte
	r, w int // bytes [r, w) are queued
	// pinned: the kernel may read this chunk after the connection stops
	// tracking it (a send given up at a ring rebuild). A pinned
	// chunk never goes back to the pool: it is dropped, and the loop's op
	// record (or its quarantine) keeps it alive while the kernel may read
	// it, so its bytes can never become another connection's.
	pinned bool
}

var chunkPool = sync.Pool{New: func() any { return &chunk{buf: make([]byte, chunkSize)} }}

// smallChunkSize is the size of the chunk a small write to an empty queue
// gets: a request-response server queues a few hundred bytes per response,
// and with many connections busy at once a full chunk each would hold
// (and touch) 16 KiB per connection. Bytes appended behind it go to full
// chunks.
const smallChunkSize = 2 << 10

var smallChunkPool = sync.Pool{New: func() any { return &chunk{buf: make([]byte, smallChunkSize)} }}

// inChunkSize is the size of a NetConn's inbound chunk: small, since most
// reads of a request-response protocol are a few hundred bytes and every
// connection with unread bytes holds at least one chunk.
const inChunkSize = 4 << 10

var inChunkPool = sync.Pool{New: func() any { return &chunk{buf: make([]byte, inChunkSize)} }}

// getChunk takes an empty chunk: an inbound one, or for outbound bytes a
// small one for a small write (n bytes) to an empty queue, else a full one.
func getChunk(inbound, empty bool, n int) *chunk {
	pool := &chunkPool
	switch {
	case inbound:
		pool = &inChunkPool
	case empty && n <= smallChunkSize:
		pool = &smallChunkPool
	}
	t := pool.Get().(*chunk)
	t.r, t.w = 0, 0
	return t
}

// putChunk gives t back to its pool unless the kernel may still read it.
func putChunk(t *chunk) {
	switch {
	case t.pinned:
	case len(t.buf) == smallChunkSize:
		smallChunkPool.Put(t)
	case len(t.buf) == inChunkSize:
		inChunkPool.Put(t)
	default:
		chunkPool.Put(t)
	}
}

// chunkQueue is a FIFO of chunks, q[head:] live: a connection's outbound
// bytes, or a NetConn's inbound ones. An empty queue holds no chunk.
type chunkQueue struct {
	q    []*chunk
	head int
	n    int // bytes queued
}

// spliceMin is the write size from which Writev copies outside the lock
// (hard-coded: 4 chunks; smaller copies are shorter than a lock hand-off).
const spliceMin = 4 * chunkSize

// fillChunks copies bufs into new chunks from the pool, full but the last.
func fillChunks(bufs [][]byte) []*chunk {
	var cs []*chunk
	var t *chunk
	for _, p := range bufs {
		for len(p) > 0 {
			if t == nil || t.w == len(t.buf) {
				t = getChunk(false, false, 0)
				cs = append(cs, t)
			}
			k := copy(t.buf[t.w:], p)
			t.w += k
			p = p[k:]
		}
	}
	return cs
}

// makeRoom slides the live chunks down, instead of growing q, when k more
// would not fit: a queue that never quite empties (a stream into a slower
// reader) would otherwise grow by a slot per chunk for as long as it runs.
func (o *chunkQueue) makeRoom(k int) {
	if o.head > 0 && len(o.q)+k > cap(o.q) {
		n := copy(o.q, o.q[o.head:])
		clear(o.q[n:])
		o.q, o.head = o.q[:n], 0
	}
}

// splice queues chunks filled by fillChunks (n bytes) behind the queued
// bytes. The chunk that was last is frozen from now on, as the rule for
// writers requires. Caller holds c.mu.
func (o *chunkQueue) splice(cs []*chunk, n int) {
	o.n += n
	o.makeRoom(len(cs))
	o.q = append(o.q, cs...)
}

// push copies p behind the queued bytes, into inbound or outbound chunks.
// Caller holds the owner's lock.
func (o *chunkQueue) push(p []byte, inbound bool) {
	o.n += len(p)
	for len(p) > 0 {
		var t *chunk
		if len(o.q) > o.head {
			t = o.q[len(o.q)-1]
		}
		if t == nil || t.w == len(t.buf) {
			t = getChunk(inbound, t == nil, len(p))
			o.makeRoom(1)
			o.q = append(o.q, t)
		}
		k := copy(t.buf[t.w:], p)
		t.w += k
		p = p[k:]
	}
}

// gather appends up to max queued ranges to iov. Caller holds c.mu.
func (o *chunkQueue) gather(iov [][]byte, max int) ([][]byte, int) {
	total := 0
	for i := o.head; i < len(o.q) && len(iov) < max; i++ {
		t := o.q[i]
		if t.w > t.r {
			iov = append(iov, t.buf[t.r:t.w])
			total += t.w - t.r
		}
	}
	return iov, total
}

// read copies up to len(p) queued bytes out and consumes them; an emptied
// queue gives a large slot array back.
func (o *chunkQueue) read(p []byte) int {
	n := 0
	for i := o.head; n < len(p) && i < len(o.q); i++ {
		t := o.q[i]
		n += copy(p[n:], t.buf[t.r:t.w])
	}
	o.consume(n)
	if o.n == 0 && cap(o.q) > 8 {
		o.q = nil
	}
	return n
}

// consume drops the first n queued bytes, returning emptied chunks to the
// pool. Caller holds the owner's lock, and no send may still reference
// those bytes.
func (o *chunkQueue) consume(n int) {
	o.n -= n
	for n > 0 {
		t := o.q[o.head]
		k := min(n, t.w-t.r)
		t.r += k
		n -= k
		if t.r == t.w {
			o.q[o.head] = nil
			o.head++
			putChunk(t)
		}
	}
	if o.head == len(o.q) {
		o.q, o.head = o.q[:0], 0
	}
}

// release returns every chunk to the pool (but pinned ones) and drops the
// queue.
func (o *chunkQueue) release() {
	for i := o.head; i < len(o.q); i++ {
		putChunk(o.q[i])
	}
	*o = chunkQueue{}
}

// pin marks the chunks holding the first n queued ranges, the ones a send
// gathered (gather skips no chunk but an empty last one), as pinned. Caller
// holds c.mu.
func (o *chunkQueue) pin(n int) {
	for i := o.head; i < len(o.q) && n > 0; i++ {
		if t := o.q[i]; t.w > t.r {
			t.pinned = true
			n--
		}
	}
}

// Write queues a copy of p for sending and returns len(p), nil: p may be
// reused as soon as Write returns. Bytes go out in the order Write calls
// return, also across goroutines (each call's bytes stay contiguous). Write
// does not block and does not wait for the peer: it queues even above the
// high-water mark, so a producer that can outrun the peer should watch
// Writable or OnWritabilityChanged. The queue is bounded all the same
// (WithOutboundLimit, default DefaultOutboundLimit): a Write made while
// more than the limit is already queued queues nothing and returns an
// error wrapping ErrOutboundLimit, and the connection closes with a reset
// (the peer sees ECONNRESET, not a FIN) and OnClose reports that error;
// later Writes return an error wrapping net.ErrClosed. So a peer that never
// reads holds at most the limit plus one Write. After Close or CloseWrite
// it returns an error wrapping net.ErrClosed. Safe for concurrent use.
func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.Writev([][]byte{p})
	return int(n), err
}

// Writev queues a copy of every buffer of bufs, in order and contiguous, as
// one Write of their concatenation would, under the same outbound limit.
// Safe for concurrent use.
func (c *Conn) Writev(bufs [][]byte) (int64, error) {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	if n >= spliceMin {
		// A large write is copied into chunks of its own before taking
		// the lock, which the loop's send completions need: copying it
		// under the lock stalled the loop for as long as the copy took.
		if err := c.queueChunks(fillChunks(bufs), int(n)); err != nil {
			return 0, err
		}
		return n, nil
	}
	c.mu.Lock()
	if c.wclosed {
		c.mu.Unlock()
		return 0, c.opError("write", "", net.ErrClosed)
	}
	if n == 0 {
		c.mu.Unlock()
		return 0, nil
	}
	if c.out.n > c.cfg.outboundLimit {
		return 0, c.overLimit()
	}
	for _, b := range bufs {
		c.out.push(b, false)
	}
	c.afterAppend()
	return n, nil
}

// queueChunks queues filled chunks holding n bytes, as Writev queues a copy
// of its buffers; the queue owns them from then on (they are freed if the
// connection is closed for writing).
func (c *Conn) queueChunks(filled []*chunk, n int) error {
	c.mu.Lock()
	if c.wclosed {
		c.mu.Unlock()
		for _, t := range filled {
			putChunk(t)
		}
		return c.opError("write", "", net.ErrClosed)
	}
	if c.out.n > c.cfg.outboundLimit {
		err := c.overLimit()
		for _, t := range filled {
			putChunk(t)
		}
		return err
	}
	c.out.splice(filled, n)
	c.afterAppend()
	return nil
}

// overLimit fails a write made while the queued bytes exceed the outbound
// limit: the connection takes no more writes and closes with a reset (the
// stream lost bytes, so the peer must not see an orderly end), OnClose
// reporting the error the write returns. Caller holds c.mu; overLimit
// unlocks it.
func (c *Conn) overLimit() error {
	err := c.opError("write", "", fmt.Errorf("%w: %d bytes queued, limit %d",
		ErrOutboundLimit, c.out.n, c.cfg.outboundLimit))
	c.wclosed = true
	c.mu.Unlock()
	abort := func() {
		if c.state == stateOpen {
			c.abort = true
			c.closeNow(err)
		}
	}
	if c.l.InLoop() {
		abort()
	} else {
		// An error means the loop is shutting down: its drain closes c.
		_ = executeRetrying(c.l, abort)
	}
	return err
}

// afterAppend publishes what an append queued, unlocks c.mu and has the
// queue flushed. Caller holds c.mu.
func (c *Conn) afterAppend() {
	kick := c.queued()
	n := c.out.n
	c.mu.Unlock()
	if kick {
		c.kick()
	}
	// Only an unwritable connection may pause. The flush counts the bytes
	// in the loop's total in any case; asking whether this is the loop
	// costs a system call, so it is asked only then.
	if c.wgen.Load()&1 == 1 && c.cfg.pauseUnwritable != pauseNever && c.l.InLoop() {
		c.chargeOut(n)
		c.syncWritePause()
	}
}

// queued publishes the queue's new size after an append and reports
// whether a flush must be queued. Caller holds c.mu.
func (c *Conn) queued() bool {
	if c.out.n > c.cfg.highWater && c.wgen.Load()&1 == 0 {
		c.wgen.Add(1) // writable → unwritable
	}
	if c.flushQueued {
		return false
	}
	c.flushQueued = true
	return true
}

// kick queues the flush as a tail task. From the loop itself this is a
// queue push (no wakeup, no system call); from another goroutine it wakes
// the loop at most once per wait. A refused task means the loop is shutting
// down: on the loop the flush runs at once; from elsewhere the bytes wait
// for the next event of c on its loop (a send completion, the peer's FIN),
// which starts the send itself, or for the drain that closes c.
func (c *Conn) kick() {
	if err := c.l.ExecuteAfterTurn(c.flushFn); err != nil {
		c.mu.Lock()
		c.flushQueued = false
		c.mu.Unlock()
		if c.l.InLoop() {
			// The loop is terminating and takes no more tasks: flush
			// now (a send the backend refuses closes the connection),
			// so nothing waits for a flush that never runs.
			c.flush()
		}
	}
}

// flush is the per-turn tail task: it starts a send unless one is in
// flight (its completion continues), and reports writability changes.
func (c *Conn) flush() {
	c.mu.Lock()
	c.flushQueued = false
	n := c.out.n
	c.mu.Unlock()
	c.chargeOut(n)
	if c.state != stateOpen {
		return
	}
	if !c.send.active {
		c.startSend()
	}
	c.notifyWritability()
}

// startSend submits one SEND or SENDMSG for the queued bytes, or,
// with nothing queued, runs what waited for the queue to drain (CloseWrite's
// shutdown, the close after the peer's FIN). Must be called on c's loop with
// no send in flight.
func (c *Conn) startSend() {
	var arr [maxSendIov][]byte // the loop copies the list: it can live on the stack
	c.mu.Lock()
	iov, total := c.out.gather(arr[:0], maxSendIov)
	c.mu.Unlock()
	if total == 0 {
		c.drained()
		return
	}
	var (
		id  loop.OpID
		err error
	)
	if len(iov) > 1 {
		id, err = c.l.IO().Sendmsg(int(c.fd), iov, 0, (*sendDone)(c))
	} else {
		id, err = c.l.IO().Send(int(c.fd), iov[0], 0, (*sendDone)(c))
	}
	if err != nil {
		c.closeNow(c.opError("write", "", err))
		return
	}
	s := &c.send
	s.id, s.active, s.ranges = id, true, int32(len(iov))
	c.ops++
}

// drained runs once the outbound queue is empty and no send is in flight.
func (c *Conn) drained() {
	if c.lingering {
		c.closeNow(nil)
		return
	}
	if c.drainEOF {
		c.closeNow(io.EOF)
		return
	}
	if c.shutWanted && !c.shutDone {
		c.shutDone = true
		c.startShutdown()
	}
}

// notifyWritability reports writability transitions to the handler: every
// one, in order, not just a changed level (Netty's behaviour). c.wgen counts
// the transitions (changed under c.mu; an even count means writable), and
// c.wseen the ones reported. A Write that crosses the high mark and a send
// completion that drains below the low mark before the next report make two
// transitions, reported as false then true, so a writer that stopped on
// Writable() false is resumed even though the level looks unchanged.
// Transitions to writable happen only in the send completion, which reports
// at once, so at most two are ever pending. Must be called on c's loop.
func (c *Conn) notifyWritability() {
	c.syncWritePause()
	g := c.wgen.Load()
	for c.wseen != g {
		if c.state != stateOpen || c.lingering {
			c.wseen = g // closed for the user: nothing more is reported
			return
		}
		c.wseen++
		if c.hasWH {
			c.callWritability(c.wseen&1 == 0)
		}
	}
}

// sendOp is the connection's send in flight and its completer.
type sendOp struct {
	id     loop.OpID
	active bool
	ranges int32 // queued ranges in flight (the first ones of the outbound queue)
}

// sendDone is a Conn seen as its send's Completer (see recvDone).
type sendDone Conn

// Complete handles the send's completions. Must be called on c's loop.
func (d *sendDone) Complete(cp *loop.Completion) {
	c := (*Conn)(d)
	s := &c.send
	res := cp.Res
	if cp.Quarantined {
		// Given up without the kernel's final word: the kernel may
		// still read these chunks, so they never return to the pool.
		c.mu.Lock()
		c.out.pin(int(s.ranges))
		c.mu.Unlock()
	}
	s.active, s.ranges = false, 0
	c.ops--
	if c.state != stateOpen {
		c.maybeFinish()
		return
	}
	if cp.Quarantined && res < 0 {
		// The outcome is unknown: some of the bytes may have gone out.
		// Reset the connection so the peer sees a failure, not a gap.
		c.abort = true
		c.closeNow(c.opError("write", "", loop.ErrGivenUp))
		return
	}
	if res < 0 {
		if errnoOf(res) == unix.EAGAIN || errnoOf(res) == unix.EINTR {
			c.startSend()
			return
		}
		// Bytes queued may never reach the peer: reset, so it sees a
		// failure rather than an orderly end with a gap.
		c.abort = true
		c.closeNow(c.resultError("write", "send", res))
		return
	}
	if c.rare != nil && c.rare.idle > 0 {
		c.rare.lastIO = now()
	}
	c.mu.Lock()
	c.out.consume(int(res))
	if c.wgen.Load()&1 == 1 && c.out.n <= c.cfg.lowWater {
		c.wgen.Add(1) // unwritable → writable
	}
	n := c.out.n
	c.mu.Unlock()
	c.chargeOut(n)
	c.notifyWritability()
	if c.state == stateOpen {
		c.startSend()
	}
}
