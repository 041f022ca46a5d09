package conn

import (
	"fmt"
	"sync/atomic"
)

// A Handler receives a connection's events. Every method runs on the
// connection's loop goroutine, one at a time, and must not block: a slow
// handler stalls every connection of that loop.
//
// The sequence for one connection is: OnOpen once, then any number of
// OnData (and OnWritabilityChanged, if implemented), then OnClose exactly
// once. A Dial that fails to connect calls no method at all: the error is
// Dial's.
//
// A panic in any callback is recovered, logged with its stack and counted
// (RecoveredPanics), and closes the connection with a reset; OnClose reports
// a *PanicError (a dial whose OnOpen panicked fails with it). A panic in
// OnClose itself is only logged and counted.
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
// becomes unwritable when Buffered rises above the high-water mark, and
// writable again at the low-water mark (WithWaterMarks).
// OnWritabilityChanged reports every transition, in order, alternating
// false and true (Netty's behaviour), even one undone before it could be
// reported, so a writer that stopped on false is always resumed. Reports
// may come later than the transition, so Writable() may already differ.
// None is made after Close. It runs on the connection's loop goroutine.
type WritabilityHandler interface {
	OnWritabilityChanged(c *Conn, writable bool)
}

// ReadHandler is optionally implemented by a Handler that consumes its
// input in frames (Netty's ByteToMessageDecoder, without a pending buffer of
// its own). When the handler has it, the connection calls OnRead instead of
// OnData: data holds the bytes OnRead left unconsumed before, followed by
// those just received, and OnRead returns how many it consumed from the
// front (0 to len(data)). The connection keeps the rest and passes it again,
// followed by new bytes, on the next call. Bytes that arrive whole and are
// consumed whole are never copied; the rest is copied once into a
// per-connection buffer. What the handler leaves unconsumed is bounded by
// WithInboundLimit (1 MiB by default: a LimitHandler hears when it is
// passed), and what all the connections of a loop keep by its budget
// (loop.WithBufferBudget), which pauses reading, never resets. data is
// valid only during the call. Bytes still unconsumed at the peer's FIN are
// dropped.
//
// A handler may stop consuming for want of room, returning how much it
// consumed so far when its connection is unwritable: the connection hands
// it what it left again, without waiting for new bytes, once it is
// writable again or reading resumes after a pause; Conn.Wake asks for that
// at any time. A handler whose answers outgrow its input (a few bytes of
// request, kilobytes of answer) may be given a receive in several calls,
// each no larger than its answers fit before the connection pauses
// (WithPauseReadWhenUnwritable).
//
// The next call's data starts with exactly the len(data)-consumed bytes
// this call left, so a handler that searches for a delimiter should
// remember how far it searched and go on from there (ExampleReadHandler):
// searching all of data on every call costs time in the square of a long
// frame's length.
type ReadHandler interface {
	OnRead(c *Conn, data []byte) (consumed int)
}

// LimitHandler is optionally implemented by a Handler that wants to answer
// before its connection ends for passing one of its declared limits: a
// ReadHandler left more than WithInboundLimit bytes unconsumed (a frame
// longer than the protocol allows), or a Write found more than
// WithOutboundLimit bytes queued. err wraps ErrInboundLimit or
// ErrOutboundLimit. OnLimit runs on the connection's loop, after reading
// stopped and the kept input was dropped; past the inbound limit the
// handler may still Write (a Redis "-ERR", an HTTP 413), and what it wrote
// is sent before the connection closes, within WithLinger; then, or at
// once with nothing written, the connection closes and OnClose reports
// err. Past the outbound limit writes fail and the connection resets.
// Nothing else ends a connection for a lack of memory: totals only pause
// reading (docs/security.md).
type LimitHandler interface {
	OnLimit(c *Conn, err error)
}

// HalfCloseHandler is optionally implemented by a Handler of connections
// made with WithHalfClose(true): OnHalfClose reports the peer's FIN (it
// will send nothing more). The connection stays open for writing until the
// handler calls Close or CloseWrite. Without WithHalfClose the FIN closes
// the connection instead and OnHalfClose is not called.
type HalfCloseHandler interface {
	OnHalfClose(c *Conn)
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

// A PanicError is the cause a connection closes with when one of its
// handler's callbacks panicked: the panic value and the stack it was
// raised on.
type PanicError struct {
	Callback string // "OnOpen", "OnData", "OnRead", "OnWritabilityChanged", "OnHalfClose", "OnLimit" or "OnClose"
	Value    any
	Stack    []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("conn: %s panicked: %v", e.Callback, e.Value)
}

// Unwrap returns the panic value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// panics counts the handler panics recovered (RecoveredPanics).
var panics atomic.Uint64

// RecoveredPanics returns how many handler callbacks have panicked (and
// were recovered) in this process. Safe for concurrent use.
func RecoveredPanics() uint64 { return panics.Load() }

// What a loop runs while it calls a handler, as its blocked-loop detector
// reports it (loop.Loop.Running).
var (
	runOnOpen               = "conn Handler.OnOpen"
	runOnData               = "conn Handler.OnData"
	runOnRead               = "conn ReadHandler.OnRead"
	runOnHalfClose          = "conn HalfCloseHandler.OnHalfClose"
	runOnWritabilityChanged = "conn WritabilityHandler.OnWritabilityChanged"
	runOnClose              = "conn Handler.OnClose"
	runOnLimit              = "conn LimitHandler.OnLimit"
	runNewHandler           = "conn ListenFunc handler factory"
	runOnPacket             = "conn PacketHandler.OnPacket"
	runOnPacketError        = "conn PacketErrorHandler.OnPacketError"
	runOnPacketClose        = "conn PacketCloseHandler.OnPacketClose"
)
