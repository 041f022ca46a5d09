package conn_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// A UDP echo server and a client, both on the loops: the server sends each
// datagram back to its sender, and the client's handler hands the reply to
// the example's goroutine.
func ExampleListenPacket() {
	g, err := loop.NewGroup()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Shutdown(context.Background())
	ctx := context.Background()

	srv, err := conn.ListenPacket(ctx, g, "udp", "127.0.0.1:0",
		conn.PacketHandlerFunc(func(pc *conn.PacketConn, data []byte, from conn.Addr) {
			pc.WriteToAddr(data, from) // copies data, which is valid during the call only
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	replies := make(chan string, 1)
	client, err := conn.DialPacket(ctx, g, "udp", srv.LocalAddr().String(),
		conn.PacketHandlerFunc(func(pc *conn.PacketConn, data []byte, from conn.Addr) {
			select {
			case replies <- string(data):
			default: // never block a loop
			}
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	client.Write([]byte("hello, datagram"))
	select {
	case r := <-replies:
		fmt.Println(r)
	case <-time.After(5 * time.Second):
		fmt.Println("no reply")
	}
	// Output: hello, datagram
}
