// Command httpserve is the HTTP workload's server: a hello-world handler of
// net/http (-stack nethttp) or fasthttp (-stack fasthttp), served on package
// net's listener (-impl net) or on ringloop's net.Listener adapter (-impl
// ringloop, with -backend uring or epoll).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"

	"github.com/ringloop/ringloop/bench/internal/serve"
)

// body is the response every request gets; the load generator checks it.
var body = []byte("Hello, World!")

func main() {
	f := serve.Register()
	impl := flag.String("impl", "net", "net or ringloop")
	backend := flag.String("backend", "uring", "uring or epoll (-impl ringloop)")
	loops := flag.Int("loops", 1, "event loops (-impl ringloop)")
	thread := flag.String("thread", "shared", "shared or locked: how the loops hold their threads (-impl ringloop; shared is the adapters' recommended configuration)")
	stack := flag.String("stack", "nethttp", "nethttp or fasthttp")
	flag.Parse()

	var ln net.Listener
	var g *loop.Group
	switch *impl {
	case "net":
		l, err := net.Listen("tcp", f.Addr)
		if err != nil {
			serve.Fatal("listen", err)
		}
		ln = l
	case "ringloop":
		b := loop.BackendUring
		if *backend == "epoll" {
			b = loop.BackendEpoll
		} else if *backend != "uring" {
			serve.Fatal("backend", fmt.Errorf("unknown backend %q", *backend))
		}
		if *thread != "shared" && *thread != "locked" {
			serve.Fatal("thread", fmt.Errorf("unknown thread mode %q", *thread))
		}
		var err error
		g, err = loop.NewGroup(loop.WithLoops(*loops), loop.WithBackend(b), loop.WithName("httpserve"),
			loop.WithSharedThread(*thread == "shared"))
		if err != nil {
			serve.Fatal("loop group", err)
		}
		l, err := conn.ListenNet(context.Background(), g, "tcp", f.Addr)
		if err != nil {
			serve.Fatal("listen", err)
		}
		ln = l
	default:
		serve.Fatal("impl", fmt.Errorf("unknown impl %q", *impl))
	}
	var stop func(context.Context)
	switch *stack {
	case "nethttp":
		stop = serveNetHTTP(ln)
	case "fasthttp":
		stop = serveFastHTTP(ln)
	default:
		serve.Fatal("stack", fmt.Errorf("unknown stack %q", *stack))
	}
	stopProfile := f.StartProfile()
	serve.Ready(ln.Addr().String())
	serve.Wait(f.MaxRuntime)
	stopProfile()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stop(ctx)
	if g != nil {
		_ = g.Shutdown(ctx)
	}
}

func serveNetHTTP(ln net.Listener) func(context.Context) {
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(body)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	return func(ctx context.Context) { _ = srv.Shutdown(ctx) }
}

func serveFastHTTP(ln net.Listener) func(context.Context) {
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/plain")
			ctx.SetBody(body)
		},
		ReadTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	return func(ctx context.Context) { _ = srv.ShutdownWithContext(ctx) }
}
