// Package conn runs TCP and Unix stream connections on ringloop's event
// loops: servers (Listen, ListenFunc) and clients (Dial, DialAsync) whose
// events reach a Handler on the connection's loop goroutine. It also runs
// UDP and Unix datagram sockets (ListenPacket, DialPacket; see Datagrams
// below).
//
// # Handler model
//
// A connection is pinned to one loop.Loop for its whole life (Netty's
// channel-to-EventLoop rule). Listen accepts on an acceptor loop and hands
// every new fd to workers.Next(); with WithReusePort each worker loop has
// its own SO_REUSEPORT listener and keeps what it accepts. Listen shares one
// Handler among all connections; ListenFunc makes one per connection, on its
// loop (Netty's ChannelInitializer), so its state needs no lock. DialAsync
// connects on the calling loop (or WithLoop's, or g.Next()) without
// blocking and completes a future on that loop; Dial waits for it and
// refuses to run on a loop goroutine (loop.ErrInLoop). Every Handler
// callback (OnOpen, OnData, OnClose, and the optional OnWritabilityChanged,
// OnRead and OnHalfClose) runs on that loop, one at a time, and must not
// block: a blocked callback stalls every connection of the loop. OnOpen
// runs once before any OnData; OnClose runs exactly once, after the fd is
// closed, with nil after a local Close, io.EOF after the peer's FIN, or a
// *net.OpError keeping the errno (errors.Is(err, syscall.ECONNRESET)) or
// wrapping os.ErrDeadlineExceeded after a timeout. A panic in a callback is
// recovered, logged with its stack and counted, and closes that connection
// with a *PanicError.
//
// # Input: framing and flow control
//
// A ReadHandler's OnRead returns how many bytes it consumed; the rest is
// kept and passed again with the next bytes (no copy for a message that
// arrives whole), bounded by WithInboundLimit. PauseRead and ResumeRead
// (Netty's autoRead) stop and restart receiving from any goroutine; while
// paused no receive is armed, so the peer stalls in its own socket.
// WithPauseReadWhenUnwritable pauses reading while the connection is
// unwritable. WithHalfClose keeps a connection open for writing after the
// peer's FIN, reported by OnHalfClose.
//
// # Affinity
//
// Every exported method of Conn and Server is safe for concurrent use: a
// method called off the loop posts its work to the loop (Loop.Execute), and
// Write from the loop itself costs a lock and a copy, no system call. The
// Handler callbacks are the loop-only side: they are called by the loop,
// never by user code. Close, CloseWrite and the Set* methods act at once
// when called on the connection's loop and are queued otherwise; the Set*
// methods then wait for the result, except on another loop's goroutine,
// where waiting could stop two loops for good. Server.Shutdown called on a
// loop starts the shutdown and returns an error wrapping loop.ErrInLoop
// instead of waiting.
//
// # Buffer ownership
//
// The slice passed to OnData is valid only during the call: it is usually
// one of the loop's provided buffers, which goes back to the kernel when
// OnData returns. Copy what must outlive the call. Write and Writev copy
// their arguments into the connection's outbound queue before returning, so
// the caller may reuse its buffer at once (echoing data from OnData is
// safe). The outbound queue is a list of pooled 16 KiB chunks (a small
// write to an empty queue takes a 2 KiB one); an idle connection holds
// none.
//
// # Sending
//
// Writes queue; once per loop turn (a tail task, Loop.ExecuteAfterTurn) the
// connection submits one SEND, or one SENDMSG gathering up to 64 queued
// chunks. One send is in flight per connection; a short write continues
// where it stopped, and bytes go out in the order the Write calls returned,
// across goroutines. Above the high-water mark (default 64 KiB) Writable
// reports false and a WritabilityHandler hears OnWritabilityChanged(false);
// at the low-water mark (default 32 KiB) it becomes writable again. Every
// transition is reported, even one undone before the handler could hear of
// it (false, then true), so a writer that resumes on true never stalls. Write
// never blocks and never refuses for backpressure: a producer must watch
// writability.
//
// # Receiving
//
// Each open connection keeps one multishot receive into the loop's
// provided-buffer ring (sized by loop.WithBufferRing); a TCP one, that is:
// a connection on a Unix socket re-arms single shots instead, because a
// multishot receive over AF_UNIX can miss the peer's shutdown. When the
// kernel ends the multishot receive the connection re-arms it; a receive
// the ring ran dry for is parked by the loop, which resubmits one receive
// per 16 buffers of the ring each loop turn, oldest first, and while any
// receive is parked rotates them, one completion each per round
// (loop/starved.go).
// Nothing is lost either way. A receive may fill up to 16 buffers at once
// (a bundle); the handler still gets the bytes at most 16 KiB at a time,
// so a pause stops them within one receive buffer. Where the backend lacks
// multishot receive the connection uses single-shot receives into a 16 KiB
// buffer of its own.
// After the peer's FIN, receiving stops, the queued writes are sent, and the
// connection closes with io.EOF: a half-closed peer (CloseWrite) still gets
// every byte written before that. Under WithHalfClose it stays open instead.
//
// # Closing
//
// Close marks the connection closed (Write then fails with net.ErrClosed)
// and stops receiving; the bytes queued by earlier Writes still go to the
// kernel, so c.Write(resp); c.Close() delivers resp as with a net.Conn.
// Once the queue is empty, or after the linger time (WithLinger, default
// 2 s; 0 drops the queue at once), the connection cancels the ops in
// flight, waits for their final completions, closes the fd with a CLOSE op
// and calls OnClose(nil). CloseWrite sends what is queued, then shuts the
// sending side down (SHUT_WR).
//
// # net.Conn and net.Listener
//
// ListenNet returns a NetListener (a net.Listener) and DialNet a NetConn (a
// net.Conn with CloseWrite, io.WriterTo and io.ReaderFrom), so net/http, crypto/tls and
// any net.Conn code run on the loops unchanged. A NetConn is its
// connection's handler: received bytes wait in a buffer bounded by
// WithInboundLimit (reading pauses when it is full); Write blocks while the
// connection is unwritable; deadlines wait in a per-loop queue served by
// one timer on the loop's wheel and report os.ErrDeadlineExceeded; Close unblocks pending calls with
// net.ErrClosed. When it wakes a blocked goroutine it asks the loop to hand
// its P off before the next wait (loop.Loop.HandOffNextWait). See
// docs/netconn.md.
//
// # Datagrams
//
// ListenPacket and DialPacket put a udp, udp4, udp6 or unixgram socket on
// one loop. Each datagram reaches PacketHandler.OnPacket with its source as
// a conn.Addr value (no allocation); WriteTo, WriteToAddr, WriteToAddrPort
// and Write copy a datagram into the socket's queue, flushed at the end of
// the loop turn, one SENDMSG each. Receives take the loop's provided
// buffers, one datagram per buffer (a multishot RECVMSG on io_uring,
// recvmmsg(2) batches on epoll): a datagram longer than MaxDatagram is
// reported as truncated (ErrTruncated), never delivered as whole. Failures
// that leave the socket open (truncation, ICMP errors on a connected
// socket, EMSGSIZE, full buffers) reach PacketErrorHandler as a
// *DatagramError. See docs/udp.md.
//
// # Defaults
//
// TCP_NODELAY on; keepalive, SO_RCVBUF and SO_SNDBUF left to the kernel;
// listen backlog 4096; water marks 32 KiB / 64 KiB; no read or idle
// timeout (WithReadTimeout, WithIdleTimeout, Conn.SetReadTimeout and
// Conn.SetIdleTimeout use the loop's timer wheel); Close
// lingers up to 2 s for queued bytes; accept
// errors that mean "out of fds or memory" (EMFILE, ENFILE, ENOBUFS, ENOMEM)
// pause accepting for 10 ms, doubling up to 1 s, instead of spinning.
//
// Both backends (loop.BackendUring and loop.BackendEpoll) run the same op
// contract, so a connection behaves identically on either.
package conn
