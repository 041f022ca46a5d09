package conn

import (
	"errors"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Errors of package conn. Failures of the network itself are *net.OpError
// values, as package net returns them, so the usual checks work:
// errors.Is(err, syscall.ECONNRESET), errors.Is(err, net.ErrClosed),
// errors.Is(err, os.ErrDeadlineExceeded).
var (
	// ErrInvalidOption is wrapped by the error Listen and Dial return for an
	// option value that cannot work.
	ErrInvalidOption = errors.New("conn: invalid option")
	// ErrUnknownNetwork is wrapped by the error Listen and Dial return for
	// a network other than "tcp", "tcp4", "tcp6" and "unix" (for a
	// datagram network the error names the function that takes it:
	// ListenPacket, DialPacket, ListenPacketNet or DialPacketNet), and by
	// the error of ListenPacket and DialPacket for a network other than
	// "udp", "udp4", "udp6" and "unixgram".
	ErrUnknownNetwork = errors.New("conn: unknown network")
	// ErrInboundLimit is wrapped by the error a connection closes with when
	// the bytes it keeps for its handler pass WithInboundLimit.
	ErrInboundLimit = errors.New("conn: inbound limit exceeded")
	// ErrOutboundLimit is wrapped by the error a Write returns, and the
	// connection closes with, when the bytes already queued for sending
	// pass WithOutboundLimit: the peer does not read what it is sent.
	ErrOutboundLimit = errors.New("conn: outbound limit exceeded")
	// ErrServerClosed is returned by Shutdown and Close once the server was
	// closed before.
	ErrServerClosed = errors.New("conn: server closed")
)

// errnoOf turns a negative completion result into its errno.
func errnoOf(res int32) unix.Errno { return unix.Errno(-res) }

// opError builds the error package net would return: a *net.OpError whose
// Err is an *os.SyscallError naming the failed call when err is an errno,
// so the errno stays reachable with errors.Is.
func opError(op, network, call string, src, dst net.Addr, err error) error {
	if errno, ok := err.(unix.Errno); ok && call != "" {
		err = os.NewSyscallError(call, errno)
	}
	return &net.OpError{Op: op, Net: network, Source: src, Addr: dst, Err: err}
}

// opError decorates err with the connection's network and addresses.
func (c *Conn) opError(op, call string, err error) error {
	return opError(op, c.network(), call, c.laddr, c.raddr, err)
}

// writesClosed is the error of a write made once c's writes are closed:
// after CloseWrite, unless Close was called since, the EPIPE the kernel
// answers a write on a socket shut down for writing with (so
// errors.Is(err, syscall.EPIPE) holds, as with package net); otherwise one
// wrapping net.ErrClosed.
func (c *Conn) writesClosed() error {
	if c.shutNotClosed() {
		return c.opError("write", "write", unix.EPIPE)
	}
	return c.opError("write", "", net.ErrClosed)
}

// shutNotClosed reports whether CloseWrite was called and Close was not:
// the state in which package net's socket answers writes with EPIPE and a
// second shutdown(2) succeeds.
func (c *Conn) shutNotClosed() bool {
	return c.shared.has(sharedWriteShut) && !c.shared.has(sharedCloseCalled)
}

// resultError maps the failed result of one of c's ops: -ECANCELED, which
// only the loop's own shutdown causes while c is open, becomes net.ErrClosed
// (a canceled op reports why it was canceled, not ECANCELED).
func (c *Conn) resultError(op, call string, res int32) error {
	errno := errnoOf(res)
	if errno == unix.ECANCELED {
		return c.opError(op, "", net.ErrClosed)
	}
	return c.opError(op, call, errno)
}

// errDeadline is what a read or idle timeout reports (wrapped in a
// *net.OpError), as package net does for an expired deadline.
var errDeadline = os.ErrDeadlineExceeded
