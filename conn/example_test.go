package conn_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// echo writes every byte it receives back to the sender.
type echo struct{ conn.NopHandler }

func (echo) OnData(c *conn.Conn, data []byte) { c.Write(data) } // Write copies data

// An echo server on the loops of a group.
func ExampleListen() {
	g, err := loop.NewGroup()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Shutdown(context.Background())
	srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", echo{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("listening on", srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
}

// printer prints what the peer sends and reports the close.
type printer struct {
	conn.NopHandler
	closed chan error
}

func (p *printer) OnData(c *conn.Conn, data []byte) { fmt.Printf("%s", data) }
func (p *printer) OnClose(c *conn.Conn, err error)  { p.closed <- err }

// A client: Dial returns once the connection is open; its events arrive on
// a loop.
func ExampleDial() {
	g, err := loop.NewGroup(loop.WithLoops(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := &printer{closed: make(chan error, 1)}
	c, err := conn.Dial(ctx, g, "tcp", "127.0.0.1:7777", h)
	if err != nil {
		fmt.Println(err)
		return
	}
	c.Write([]byte("hello\n"))
	c.CloseWrite() // the echo server sees EOF after our line
	fmt.Println(<-h.closed)
}

// lines is a line protocol: it answers each complete line and leaves a
// partial one to the connection, which passes it again with the bytes that
// complete it. It keeps no pending buffer of its own, only how far it
// searched, so there is one per connection (ListenFunc).
type lines struct {
	conn.NopHandler
	scanned int // bytes after the consumed ones already searched
}

func (h *lines) OnRead(c *conn.Conn, data []byte) (consumed int) {
	for {
		// The bytes left unconsumed last time come first in data and
		// were searched already: each byte is searched once.
		i := bytes.IndexByte(data[consumed+h.scanned:], '\n')
		if i < 0 {
			h.scanned = len(data) - consumed
			return consumed // the rest waits for more bytes
		}
		end := consumed + h.scanned + i
		line := data[consumed:end]
		fmt.Fprintf(c, "%d bytes: %s\n", len(line), line)
		consumed, h.scanned = end+1, 0
	}
}

// A line protocol on ReadHandler: a line split across two sends is answered
// once it is complete.
func ExampleReadHandler() {
	g, err := loop.NewGroup(loop.WithLoops(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Shutdown(context.Background())
	srv, err := conn.ListenFunc(context.Background(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler { return &lines{} })
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	c.Write([]byte("hello\nwor"))
	answer, _ := r.ReadString('\n')
	fmt.Print(answer)
	c.Write([]byte("ld\n"))
	answer, _ = r.ReadString('\n')
	fmt.Print(answer)
	// Output:
	// 5 bytes: hello
	// 5 bytes: world
}
