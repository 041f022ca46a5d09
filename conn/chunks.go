package conn

import "sync"

// Outbound bytes, and a NetConn's received ones, wait in chunkQueues of
// pooled chunks.
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

// midChunkSize is the size of the chunk a write of up to 8 KiB to an empty
// queue gets, and a write of up to 4 KiB takes an inbound chunk's size:
// many connections that each hold one answer (peers that do not read it,
// their loop past its budget) hold about that answer, not a full chunk.
const midChunkSize = 8 << 10

var midChunkPool = sync.Pool{New: func() any { return &chunk{buf: make([]byte, midChunkSize)} }}

// getChunk takes an empty chunk: an inbound one, or for outbound bytes the
// smallest that holds n bytes when sized (a write to an empty queue, or a
// queue's next chunk), else a full one.
func getChunk(inbound, sized bool, n int) *chunk {
	pool := &chunkPool
	switch {
	case inbound:
		pool = &inChunkPool
	case sized && n <= smallChunkSize:
		pool = &smallChunkPool
	case sized && n <= inChunkSize:
		pool = &inChunkPool
	case sized && n <= midChunkSize:
		pool = &midChunkPool
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
	case len(t.buf) == midChunkSize:
		midChunkPool.Put(t)
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
			// The smallest chunk that holds p, or the bytes queued
			// before it if more: a queue that grows by small writes
			// gets chunks that double, few to send, and none much
			// bigger than what it holds (peers that read nothing,
			// each holding a small answer, hold about that).
			t = getChunk(inbound, true, max(len(p), o.n-len(p)))
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
