package conn_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// The proxy in Netty's manner: each accepted connection (the frontend)
// dials its backend on its own loop, reads nothing until the backend is
// connected, then relays both ways. Each side stops reading while the
// other side cannot take more (is not writable), so a slow reader on
// either end stalls its sender instead of filling the proxy's memory. A
// FIN is passed on as a half-close; the pair closes once both directions
// are done, or at once when either side fails.

// proxyFront is the frontend's handler (one per connection: ListenFunc).
type proxyFront struct {
	g       *loop.Group
	target  string
	back    *conn.Conn // set on the loop once connected
	opts    []conn.Option
	onClose func(err error) // for tests; may be nil
	maxBuf  *atomic.Int64   // for tests: the largest Buffered after a Write; may be nil
}

// record notes c's Buffered in max (a test's probe).
func record(max *atomic.Int64, c *conn.Conn) {
	if max != nil {
		if n := int64(c.Buffered()); n > max.Load() {
			max.Store(n)
		}
	}
}

func (f *proxyFront) OnOpen(front *conn.Conn) {
	front.PauseRead() // until the backend is connected
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	conn.DialAsync(ctx, f.g, "tcp", f.target, &proxyBack{front: front, maxBuf: f.maxBuf}, f.opts...).
		OnDone(func(back *conn.Conn, err error) {
			cancel()
			if err != nil {
				front.Close()
				return
			}
			f.back = back // on front's loop: DialAsync used it
			front.ResumeRead()
		})
}

func (f *proxyFront) OnData(front *conn.Conn, data []byte) {
	f.back.Write(data)
	record(f.maxBuf, f.back)
	if !f.back.Writable() {
		front.PauseRead() // resumed by the backend's OnWritabilityChanged
	}
}

func (f *proxyFront) OnWritabilityChanged(front *conn.Conn, writable bool) {
	if f.back == nil {
		return
	}
	if writable {
		f.back.ResumeRead()
	} else {
		f.back.PauseRead()
	}
}

func (f *proxyFront) OnHalfClose(front *conn.Conn) {
	if f.back != nil {
		f.back.CloseWrite()
	}
}

func (f *proxyFront) OnClose(front *conn.Conn, err error) {
	if f.back != nil {
		f.back.Close()
	}
	if f.onClose != nil {
		f.onClose(err)
	}
}

// proxyBack is the backend connection's handler.
type proxyBack struct {
	front  *conn.Conn
	maxBuf *atomic.Int64
}

func (b *proxyBack) OnOpen(back *conn.Conn) {}

func (b *proxyBack) OnData(back *conn.Conn, data []byte) {
	b.front.Write(data)
	record(b.maxBuf, b.front)
	if !b.front.Writable() {
		back.PauseRead() // resumed by the frontend's OnWritabilityChanged
	}
}

func (b *proxyBack) OnWritabilityChanged(back *conn.Conn, writable bool) {
	if writable {
		b.front.ResumeRead()
	} else {
		b.front.PauseRead()
	}
}

func (b *proxyBack) OnHalfClose(back *conn.Conn) { b.front.CloseWrite() }

func (b *proxyBack) OnClose(back *conn.Conn, err error) { b.front.Close() }

// listenProxy serves a proxy to target on g.
func listenProxy(g *loop.Group, target string, onClose func(error), maxBuf *atomic.Int64, opts ...conn.Option) (*conn.Server, error) {
	opts = append(opts, conn.WithHalfClose(true))
	return conn.ListenFunc(context.Background(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler {
		return &proxyFront{g: g, target: target, opts: opts, onClose: onClose, maxBuf: maxBuf}
	}, opts...)
}

// A proxy: the backend is dialed on the frontend's loop with DialAsync,
// and each side's reading follows the other side's writability.
func ExampleDialAsync() {
	g, err := loop.NewGroup(loop.WithLoops(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Shutdown(context.Background())
	backend, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", echo{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer backend.Close()
	proxy, err := listenProxy(g, backend.Addr().String(), nil, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer proxy.Close()

	c, err := net.Dial("tcp", proxy.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "hello through the proxy\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	fmt.Print(line, err)
	// Output:
	// hello through the proxy
	// <nil>
}
