package conn_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// upperLines answers every complete line with its upper-case form; a
// partial line waits in the connection's inbound buffer.
type upperLines struct {
	conn.NopHandler
	closed chan error
	calls  int
}

func (h *upperLines) OnRead(c *conn.Conn, data []byte) int {
	h.calls++
	used := 0
	for {
		i := bytes.IndexByte(data[used:], '\n')
		if i < 0 {
			return used
		}
		c.Write(bytes.ToUpper(data[used : used+i+1]))
		used += i + 1
	}
}

func (h *upperLines) OnClose(c *conn.Conn, err error) { h.closed <- err }

// TestReadHandlerFraming: lines split at every possible boundary arrive
// whole at the protocol, in order, with no pending buffer in the handler.
func TestReadHandlerFraming(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := &upperLines{closed: make(chan error, 1)}
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.(*net.TCPConn).SetNoDelay(true)
		rng := rand.New(rand.NewPCG(1, 2))
		var want strings.Builder
		var stream []byte
		for i := range 2000 {
			line := fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", rng.IntN(300)))
			stream = append(stream, line...)
			want.WriteString(strings.ToUpper(line))
		}
		go func() {
			// Random pieces, some sent with a pause so they arrive
			// apart.
			for rest := stream; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(700))
				if _, err := c.Write(rest[:n]); err != nil {
					return
				}
				rest = rest[n:]
				if rng.IntN(20) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		got := make([]byte, want.Len())
		r := bufio.NewReader(c)
		for off := 0; off < len(got); {
			n, err := r.Read(got[off:])
			if err != nil {
				t.Fatalf("after %d bytes: %v", off, err)
			}
			off += n
		}
		if string(got) != want.String() {
			t.Fatal("the answers differ from the upper-cased lines")
		}
	})
}

// TestReadHandlerNoCopy: lines that arrive whole and are consumed whole
// never make the connection keep a buffer.
func TestReadHandlerNoCopy(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		sh := &upperLines{closed: make(chan error, 1)}
		opened := make(chan *conn.Conn, 1)
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, &openNotify{upperLines: sh, opened: opened})
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sc := <-opened
		r := bufio.NewReader(c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		for i := range 100 {
			fmt.Fprintf(c, "ping %d\n", i)
			line, err := r.ReadString('\n')
			if err != nil || line != fmt.Sprintf("PING %d\n", i) {
				t.Fatalf("reply %q, %v", line, err)
			}
		}
		if n := conn.InboundCap(sc); n != 0 {
			t.Fatalf("the connection kept a %d-byte inbound buffer for whole lines", n)
		}
	})
}

type openNotify struct {
	*upperLines
	opened chan *conn.Conn
}

func (h *openNotify) OnOpen(c *conn.Conn) { h.opened <- c }

// TestReadHandlerLimits: a frame longer than WithInboundLimit closes the
// connection with ErrInboundLimit; an OnRead that claims more bytes than
// it was given closes it with an error.
func TestReadHandlerLimits(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		t.Run("inbound-limit", func(t *testing.T) {
			h := &upperLines{closed: make(chan error, 1)}
			srv := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithInboundLimit(64<<10))
			c, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go c.Write(bytes.Repeat([]byte("y"), 256<<10)) // no newline
			select {
			case err := <-h.closed:
				if !errors.Is(err, conn.ErrInboundLimit) {
					t.Fatalf("OnClose: %v, want ErrInboundLimit", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the connection did not close")
			}
		})
		t.Run("bad-count", func(t *testing.T) {
			h := &badCount{closed: make(chan error, 1)}
			srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
			c, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("abc"))
			select {
			case err := <-h.closed:
				if err == nil || !strings.Contains(err.Error(), "OnRead consumed 4 of 3 bytes") {
					t.Fatalf("OnClose: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the connection did not close")
			}
		})
	})
}

type badCount struct {
	conn.NopHandler
	closed chan error
}

func (h *badCount) OnRead(c *conn.Conn, data []byte) int { return len(data) + 1 }
func (h *badCount) OnClose(c *conn.Conn, err error)      { h.closed <- err }
