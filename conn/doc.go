// Package conn runs TCP and Unix stream connections on ringloop's event
// loops: servers (Listen, ListenFunc) and clients (Dial, DialAsync) whose
// events reach a Handler on the connection's loop goroutine. It also runs
// UDP and Unix datagram sockets (ListenPacket, DialPacket) and offers
// net.Conn, net.Listener and net.PacketConn adapters (DialNet, ListenNet,
// ListenPacketNet, DialPacketNet) so that net/http, crypto/tls and other
// code written for package net run on the loops unchanged.
//
// # Handler model
//
// A connection is pinned to one loop.Loop for its whole life (Netty's
// channel-to-EventLoop rule). Listen accepts on an acceptor loop and hands
// every new fd to workers.Next(); with WithReusePort each worker loop has
// its own SO_REUSEPORT listener. Listen shares one Handler among all
// connections; ListenFunc makes one per connection, on its loop, so its
// state needs no lock. Every Handler callback runs on the connection's
// loop, one at a time, and must not block: a blocked callback stalls every
// connection of the loop. A panic in a callback is recovered, logged with
// its stack and counted, and closes that connection with a *PanicError.
// conn logs through the logger of the connection's group
// (loop.WithLogger, read with Loop.Logger).
//
// # Affinity and buffers
//
// Every exported method of Conn and Server is safe for concurrent use: a
// method called off the loop posts its work to the loop. The slice passed
// to OnData is valid only during the call (it is usually one of the loop's
// provided buffers); Write and Writev copy their arguments before
// returning. Write never blocks: a producer watches Writable or
// OnWritabilityChanged (water marks, default 32 KiB / 64 KiB), goroutines
// use WriteWait, which waits for room, and a Write made while more than
// WithOutboundLimit (16 MiB) is queued fails with ErrOutboundLimit.
// Reading pauses by default where replies pile up, within one receive
// (WithPauseReadWhenUnwritable), so a peer that never reads stalls in its
// own socket. PauseRead and ResumeRead stop and restart receiving; a
// ReadHandler consumes its input in frames, and Wake hands it what it left
// again.
//
// # Flow control
//
// One model bounds what peers cost (docs/security.md, "The model"):
// backpressure first (past its marks a connection is not read, and its
// peer waits in its own socket); the totals of each loop bounded by pausing
// the connections that cost most for the least progress
// (loop.WithBufferBudget), never by resetting anyone; resets only for a
// connection's own declared limits (WithInboundLimit, WithOutboundLimit),
// after a LimitHandler has heard and could answer.
//
// A callback must not wait for its own loop, which would never get to
// what it waits for: the blocking calls return an error wrapping
// loop.ErrInLoop at once instead. Dial and Server.Shutdown do so on any
// loop, the net adapters' Read, Write and Accept where they would wait,
// and the Wait of a pending future on the loop that completes it
// (DialAsync's, CloseFuture's, a timer's); use OnDone there. docs/conn.md,
// "Loop affinity", lists every blocking call.
//
// # Closing
//
// Close stops receiving at once; the bytes queued by earlier Writes still
// go to the kernel while the peer takes them (WithLinger bounds the time
// without progress, default 2 s), then the fd is closed and OnClose runs
// exactly once: with nil after a local Close that dropped nothing, io.EOF
// after the peer's FIN, or a *net.OpError keeping the errno
// (errors.Is(err, syscall.ECONNRESET)) or saying why queued bytes were
// dropped.
//
// Both backends (loop.BackendUring and loop.BackendEpoll) run the same op
// contract, so a connection behaves identically on either. docs/conn.md,
// docs/netconn.md and docs/udp.md describe the package in full.
//
// # Counters
//
// Server.Stats, Conn.Stats and PacketConn.Stats count connections, bytes
// and datagrams from any goroutine; Servers and PacketConns list what is
// open, which package metrics publishes (docs/operations.md).
package conn
