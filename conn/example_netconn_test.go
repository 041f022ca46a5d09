package conn_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// net/http served unchanged on the loops: ListenNet returns a
// net.Listener, and a Transport dials with DialNet.
func ExampleListenNet() {
	// Loops on the shared thread, the adapters' configuration
	// (docs/netconn.md, "Which thread for the adapters").
	g, err := loop.NewGroup(loop.WithSharedThread(true))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Shutdown(context.Background())
	ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s", r.URL.Path)
		}),
		ReadTimeout: 10 * time.Second,
	}
	go srv.Serve(ln)

	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return conn.DialNet(ctx, g, network, addr)
		},
	}}
	resp, err := client.Get("http://" + ln.Addr().String() + "/ringloop")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, string(body))

	client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fmt.Println("shutdown:", srv.Shutdown(ctx))
	// Output:
	// 200 OK hello from /ringloop
	// shutdown: <nil>
}
