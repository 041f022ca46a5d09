package conn

// A Handler receives a connection's events. Every method runs on the
// connection's loop goroutine, one at a time, and must not block: a slow
// handler stalls every connection of that loop.
//
// The sequence for one connection is: OnOpen once, then any number of
// OnData (and OnWritabilityChanged, if implemented), then OnClose exactly
// once. A Dial that fails to connect calls no method at all: the error is
// Dial's.
//
// A panic in OnOpen or OnData is recovered, logged with its stack, and
// closes the connection with a reset; OnClose reports a *PanicError. A Dial
// whose OnOpen panicked returns that error (OnClose still follows its
// OnOpen).
type Handler interface {
	// OnOpen runs once, before any OnData, when the connection is
	// established (accepted, or connected by Dial).
	OnOpen(c *Conn)

	// OnData delivers received bytes. data is valid only during the call:
	// it may be one of the loop's provided buffers, which returns to the
	// kernel as soon as OnData returns. Copy what must outlive the call;
	// c.Write(data) copies, so echoing it is safe.
	OnData(c *Conn, data []byte)

	// OnClose runs exactly once, after the connection's fd is closed. err
	// is nil after a local Close, io.EOF after the peer's FIN (once the
	// connection is fully closed: queued writes are flushed first),
	// otherwise a *net.OpError that keeps the errno (errors.Is(err,
	// syscall.ECONNRESET)) or wraps os.ErrDeadlineExceeded after a read or
	// idle timeout, or net.ErrClosed when the loop shut down under it.
	OnClose(c *Conn, err error)
}

// WritabilityHandler is optionally implemented by a Handler. The connection
// becomes unwritable when its outbound bytes not yet sent (Buffered) rise
// above the high-water mark, and writable again once they drop to the
// low-water mark or below (WithWaterMarks). OnWritabilityChanged reports
// every transition, in order, alternating false and true (Netty's
// behaviour): a queue that rose above the high mark and drained below the
// low one before the connection could report either is reported as false,
// then true, so a writer that stopped on Writable() false and resumes on
// true is always resumed. Reports may come later than the transition (at
// the end of the loop turn or on a send completion), so Writable() may
// already differ when one runs. None is made after Close. It runs on the
// connection's loop goroutine.
type WritabilityHandler interface {
	OnWritabilityChanged(c *Conn, writable bool)
}

// NopHandler implements Handler with methods that do nothing. Embed it to
// implement only the callbacks you need.
type NopHandler struct{}

// OnOpen does nothing.
func (NopHandler) OnOpen(*Conn) {}

// OnData does nothing.
func (NopHandler) OnData(*Conn, []byte) {}

// OnClose does nothing.
func (NopHandler) OnClose(*Conn, error) {}
