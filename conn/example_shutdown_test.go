package conn_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// Graceful shutdown of net/http on the loops: Shutdown closes the listener,
// lets the request in flight finish, then closes the idle connections.
func ExampleListenNet_shutdown() {
	// Client and server in one process: loops on the shared thread.
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

	started := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		time.Sleep(100 * time.Millisecond) // a slow request
		fmt.Fprint(w, "done")
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	answer := make(chan string, 1)
	go func() {
		resp, err := client.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answer <- string(body)
	}()

	<-started // the request is in flight
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fmt.Println("shutdown:", srv.Shutdown(ctx))
	fmt.Println("request:", <-answer)
	fmt.Println("serve:", <-served)
	// Output:
	// shutdown: <nil>
	// request: done
	// serve: http: Server closed
}
