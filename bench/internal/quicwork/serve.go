package quicwork

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/quic-go/quic-go"
)

// Serve accepts connections on ln until it is closed and serves every
// stream their clients open, each on a goroutine of its own.
func Serve(ln *quic.Listener) {
	for {
		c, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		go serveConn(c)
	}
}

func serveConn(c *quic.Conn) {
	for {
		s, err := c.AcceptStream(context.Background())
		if err != nil {
			return
		}
		go serveStream(c, s)
	}
}

// ErrCodeBadStream resets a stream that breaks the protocol.
const ErrCodeBadStream quic.StreamErrorCode = 1

func serveStream(c *quic.Conn, s *quic.Stream) {
	var op [1]byte
	if _, err := io.ReadFull(s, op[:]); err != nil {
		s.CancelWrite(ErrCodeBadStream)
		return
	}
	switch op[0] {
	case OpEcho:
		echo(s)
	case OpBulk:
		bulkWrite(s)
	case OpGSO:
		answer := []byte{'0'}
		if c.ConnectionState().GSO {
			answer[0] = '1'
		}
		_, _ = s.Write(answer)
		_ = s.Close()
	default:
		s.CancelRead(ErrCodeBadStream)
		s.CancelWrite(ErrCodeBadStream)
	}
}

var requestBuffers = sync.Pool{New: func() any {
	b := make([]byte, MaxRequest+1)
	return &b
}}

// echo reads the request to the end of the client's side of the stream
// and writes it back as the response.
func echo(s *quic.Stream) {
	bp := requestBuffers.Get().(*[]byte)
	defer requestBuffers.Put(bp)
	buf := *bp
	n := 0
	for {
		k, err := s.Read(buf[n:])
		n += k
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil || n == len(buf) {
			s.CancelRead(ErrCodeBadStream)
			s.CancelWrite(ErrCodeBadStream)
			return
		}
	}
	if _, err := s.Write(buf[:n]); err != nil {
		return
	}
	_ = s.Close()
}

// bulkWrite writes the bulk pattern until the client stops reading (or
// the connection ends).
func bulkWrite(s *quic.Stream) {
	var off uint64
	for {
		n, err := s.Write(Bulk(off, BulkChunk))
		off += uint64(n)
		if err != nil {
			return
		}
	}
}
