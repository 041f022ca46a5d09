// Command quicserve is the QUIC workload's server: quic-go on package net's
// UDP socket (-impl net) or on ringloop's net.PacketConn adapter,
// conn.ListenPacketNet (-impl ringloop, with -backend uring or epoll),
// serving the streams of package internal/quicwork (quicwork.Serve): a
// request written back as the response, an endless bulk download, and a
// query of whether quic-go sends with GSO on the connection.
//
// Like the echo servers it prints "LISTEN host:port" once listening and
// exits on SIGTERM or after -max-runtime. Datagrams the adapter's inbound
// queue dropped are reported on standard error at exit.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"

	"github.com/ringloop/ringloop/bench/internal/quicwork"
	"github.com/ringloop/ringloop/bench/internal/serve"
)

// receiveBuffer is the socket receive buffer quic-go asks for; the
// adapter's inbound queue gets the same bound.
const receiveBuffer = 7 << 20

func main() {
	f := serve.Register()
	impl := flag.String("impl", "net", "net (net.ListenUDP) or ringloop (conn.ListenPacketNet)")
	backend := flag.String("backend", "uring", "uring or epoll (-impl ringloop)")
	flag.Parse()

	var pc net.PacketConn
	var np *conn.NetPacketConn
	var g *loop.Group
	switch *impl {
	case "net":
		addr, err := net.ResolveUDPAddr("udp4", f.Addr)
		if err != nil {
			serve.Fatal("address", err)
		}
		uc, err := net.ListenUDP("udp4", addr)
		if err != nil {
			serve.Fatal("listen", err)
		}
		pc = uc
	case "ringloop":
		var b loop.Backend
		switch *backend {
		case "uring":
			b = loop.BackendUring
		case "epoll":
			b = loop.BackendEpoll
		default:
			serve.Fatal("backend", fmt.Errorf("unknown backend %q (uring or epoll)", *backend))
		}
		var err error
		g, err = loop.NewGroup(loop.WithLoops(1), loop.WithBackend(b), loop.WithName("quicserve"))
		if err != nil {
			serve.Fatal("loop group", err)
		}
		np, err = conn.ListenPacketNet(context.Background(), g, "udp4", f.Addr, conn.WithInboundLimit(receiveBuffer))
		if err != nil {
			serve.Fatal("listen", err)
		}
		pc = np
	default:
		serve.Fatal("impl", fmt.Errorf("unknown impl %q (net or ringloop)", *impl))
	}
	tlsConf, err := quicwork.ServerTLS()
	if err != nil {
		serve.Fatal("certificate", err)
	}
	tr := &quic.Transport{Conn: pc}
	ln, err := tr.Listen(tlsConf, quicwork.Config())
	if err != nil {
		serve.Fatal("quic listen", err)
	}
	go quicwork.Serve(ln)

	stopProfile := f.StartProfile()
	serve.Ready(pc.LocalAddr().String())
	serve.Wait(f.MaxRuntime)
	stopProfile()
	_ = ln.Close()
	_ = tr.Close()
	if np != nil {
		if n := np.Dropped(); n > 0 {
			fmt.Fprintf(os.Stderr, "the adapter's inbound queue dropped %d datagrams\n", n)
		}
	}
	_ = pc.Close()
	if g != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	}
}
