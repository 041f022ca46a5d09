package conn_test

import (
	"context"
	"fmt"
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
