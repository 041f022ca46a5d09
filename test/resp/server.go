// Package resp is a small Redis (RESP2) server on ringloop's callback API,
// for tests: GET, SET, DEL, PING and CONFIG GET (redis-benchmark asks for
// two parameters at its start), in multibulk or inline form, with bulk
// strings of any length.
//
// Each connection's handler is a conn.ReadHandler with default options. It
// copies each argument out of its input as the bytes arrive (a value is
// what the server keeps anyway), so a 512 KiB value never waits in the
// connection's inbound buffer, bounded at 64 KiB by default. It stops
// consuming while the connection is unwritable, pausing reading, and
// resumes on OnWritabilityChanged(true), so a client that pipelines
// requests for large values costs the server at most the high-water mark
// and one answer.
package resp

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// maxLine is the longest header or inline command line accepted, and
// maxArgs the most arguments of one command.
const (
	maxLine = 64 << 10
	maxArgs = 1 << 20
	maxBulk = 512 << 20 // Redis's proto-max-bulk-len
)

// A Store holds the keys, shared by every connection of every loop.
type Store struct {
	mu sync.RWMutex
	m  map[string][]byte
}

// NewStore returns an empty store.
func NewStore() *Store { return &Store{m: map[string][]byte{}} }

func (s *Store) get(k []byte) ([]byte, bool) {
	s.mu.RLock()
	v, ok := s.m[string(k)]
	s.mu.RUnlock()
	return v, ok
}

func (s *Store) set(k, v []byte) {
	s.mu.Lock()
	s.m[string(k)] = v
	s.mu.Unlock()
}

func (s *Store) del(k []byte) bool {
	s.mu.Lock()
	_, ok := s.m[string(k)]
	delete(s.m, string(k))
	s.mu.Unlock()
	return ok
}

// Listen serves store on address with a session per connection and the
// options given (none: the defaults).
func Listen(ctx context.Context, g *loop.Group, address string, store *Store, opts ...conn.Option) (*conn.Server, error) {
	return conn.ListenFunc(ctx, g, "tcp", address, func(*conn.Conn) conn.Handler { return &session{store: store} }, opts...)
}

// Parser states.
const (
	stateCommand  = iota // at the start of a command
	stateArgLen          // at a "$len" line
	stateArgBytes        // inside an argument's bytes
	stateArgEnd          // at the CRLF after an argument
)

// A session is one connection's handler and parser.
type session struct {
	conn.NopHandler
	store   *Store
	state   int
	scanned int      // bytes past the consumed ones already searched for '\n'
	left    int      // arguments still to come
	need    int      // bytes still to come of the current argument
	args    [][]byte // the command's arguments so far, owned
	paused  bool     // reading paused by the session while unwritable
	scratch []byte   // a reply under construction
}

// OnRead consumes complete commands, and the bytes of an argument as they
// come, answering each command; it stops while the connection is
// unwritable.
func (s *session) OnRead(c *conn.Conn, data []byte) (consumed int) {
	for consumed < len(data) {
		if !c.Writable() {
			// The answers wait for the peer: stop here and go on with the
			// rest of data once the connection is writable.
			s.paused = true
			c.PauseRead()
			return consumed
		}
		rest := data[consumed:]
		switch s.state {
		case stateArgBytes:
			k := min(s.need, len(rest))
			a := &s.args[len(s.args)-1]
			*a = append(*a, rest[:k]...)
			s.need -= k
			consumed += k
			if s.need == 0 {
				s.state = stateArgEnd
			}
		case stateArgEnd:
			if len(rest) < 2 {
				return consumed
			}
			if rest[0] != '\r' || rest[1] != '\n' {
				return s.protocolError(c, consumed, "expected CRLF after a bulk string")
			}
			consumed += 2
			s.left--
			s.state = stateArgLen
			if s.left == 0 {
				s.state = stateCommand
				s.execute(c)
			}
		default: // a line: a command's header, an argument's length, an inline command
			i := bytes.IndexByte(rest[s.scanned:], '\n')
			if i < 0 {
				if len(rest) > maxLine {
					return s.protocolError(c, consumed, "line too long")
				}
				s.scanned = len(rest)
				return consumed
			}
			line := rest[:s.scanned+i]
			consumed += s.scanned + i + 1
			s.scanned = 0
			line = bytes.TrimSuffix(line, []byte("\r"))
			if s.state == stateArgLen {
				if len(line) == 0 || line[0] != '$' {
					return s.protocolError(c, consumed, "expected '$', got "+strconv.Quote(string(line)))
				}
				n, err := strconv.Atoi(string(line[1:]))
				if err != nil || n < 0 || n > maxBulk {
					return s.protocolError(c, consumed, "invalid bulk length")
				}
				s.args = append(s.args, make([]byte, 0, n))
				s.need = n
				s.state = stateArgBytes
				if n == 0 {
					s.state = stateArgEnd
				}
				continue
			}
			if len(line) > 0 && line[0] == '*' {
				n, err := strconv.Atoi(string(line[1:]))
				if err != nil || n > maxArgs {
					return s.protocolError(c, consumed, "invalid multibulk length")
				}
				s.args = s.args[:0]
				if n > 0 {
					s.left = n
					s.state = stateArgLen
				}
				continue
			}
			// An inline command: words separated by blanks.
			s.args = s.args[:0]
			for _, f := range strings.Fields(string(line)) {
				s.args = append(s.args, []byte(f))
			}
			if len(s.args) > 0 {
				s.execute(c)
			}
		}
	}
	return consumed
}

// OnWritabilityChanged resumes reading once the answers drained.
func (s *session) OnWritabilityChanged(c *conn.Conn, writable bool) {
	if writable && s.paused {
		s.paused = false
		c.ResumeRead()
	}
}

// protocolError answers an error and closes the connection, as Redis does.
func (s *session) protocolError(c *conn.Conn, consumed int, msg string) int {
	c.Write([]byte("-ERR Protocol error: " + msg + "\r\n"))
	c.Close()
	return consumed
}

// execute runs the command in s.args and writes its answer.
func (s *session) execute(c *conn.Conn) {
	args := s.args
	defer func() {
		// Keep the slice, drop the arguments (SET kept the value).
		clear(s.args)
		s.args = s.args[:0]
	}()
	cmd := strings.ToUpper(string(args[0]))
	switch {
	case cmd == "PING" && len(args) == 1:
		c.Write([]byte("+PONG\r\n"))
	case cmd == "PING" && len(args) == 2:
		s.bulk(c, args[1])
	case cmd == "SET" && len(args) >= 3:
		s.store.set(args[1], args[2]) // options (EX, NX, ...) are ignored
		c.Write([]byte("+OK\r\n"))
	case cmd == "GET" && len(args) == 2:
		if v, ok := s.store.get(args[1]); ok {
			s.bulk(c, v)
		} else {
			c.Write([]byte("$-1\r\n"))
		}
	case cmd == "DEL" && len(args) >= 2:
		n := 0
		for _, k := range args[1:] {
			if s.store.del(k) {
				n++
			}
		}
		c.Write(strconv.AppendInt([]byte(":"), int64(n), 10))
		c.Write([]byte("\r\n"))
	case cmd == "CONFIG" && len(args) == 3 && strings.EqualFold(string(args[1]), "GET"):
		// redis-benchmark asks for save and appendonly at its start, and
		// warns when it gets no pair; other parameters get an empty
		// array, as Redis gives for an unknown one.
		switch p := strings.ToLower(string(args[2])); p {
		case "save", "appendonly":
			c.Write([]byte("*2\r\n"))
			s.bulk(c, []byte(p))
			s.bulk(c, []byte(map[string]string{"save": "", "appendonly": "no"}[p]))
		default:
			c.Write([]byte("*0\r\n"))
		}
	default:
		c.Write([]byte("-ERR unknown command '" + strings.ToLower(cmd) + "'\r\n"))
	}
}

// bulk writes v as a bulk string.
func (s *session) bulk(c *conn.Conn, v []byte) {
	s.scratch = strconv.AppendInt(append(s.scratch[:0], '$'), int64(len(v)), 10)
	s.scratch = append(s.scratch, '\r', '\n')
	c.Writev([][]byte{s.scratch, v, []byte("\r\n")})
}
