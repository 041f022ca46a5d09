package conn_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// counter is a per-connection handler: its state is plain fields, touched
// only by its connection's loop.
type counter struct {
	conn.NopHandler
	id    int
	bytes int
}

func (h *counter) OnData(c *conn.Conn, data []byte) {
	h.bytes += len(data)
	fmt.Fprintf(c, "conn %d: %d bytes\n", h.id, h.bytes)
}

// TestListenFunc: ListenFunc makes one handler per connection, on the
// connection's loop; a factory that panics or returns nil closes that
// connection only, and the server forgets it.
func TestListenFunc(t *testing.T) {
	ctQuietLogs(t)
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		var made atomic.Int64
		var offLoop atomic.Int64
		srv, err := conn.ListenFunc(context.Background(), g, "tcp", "127.0.0.1:0", func(c *conn.Conn) conn.Handler {
			if !c.Loop().InLoop() {
				offLoop.Add(1)
			}
			n := int(made.Add(1))
			switch n {
			case 3:
				panic("factory fails")
			case 4:
				return nil
			}
			return &counter{id: n}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		panicsBefore := conn.RecoveredPanics()
		for i := 1; i <= 6; i++ {
			c, err := net.Dial("tcp", srv.Addr().String())
			if err != nil && (i == 3 || i == 4) {
				continue // reset before the dial returned
			}
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if i == 3 || i == 4 {
				// No handler: closed with a reset, nothing sent.
				if _, err := io.ReadAll(c); err == nil {
					t.Logf("connection %d: orderly close", i)
				}
				c.Close()
				continue
			}
			for k := 1; k <= 3; k++ {
				if _, err := c.Write([]byte("abcd")); err != nil {
					t.Fatal(err)
				}
				want := fmt.Sprintf("conn %d: %d bytes\n", i, 4*k)
				got := make([]byte, len(want))
				if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
					t.Fatalf("reply %q, %v; want %q", got, err, want)
				}
			}
			c.Close()
		}
		ctWaitFor(t, 10*time.Second, "every connection closed", func() bool { return srv.Conns() == 0 })
		if n := offLoop.Load(); n != 0 {
			t.Fatalf("the factory ran off the connection's loop %d times", n)
		}
		if d := conn.RecoveredPanics() - panicsBefore; d < 1 {
			t.Fatalf("RecoveredPanics grew by %d, want the factory's panic counted", d)
		}
	})
}
