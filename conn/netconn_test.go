package conn_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"golang.org/x/net/nettest"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// ncPipe returns a nettest.MakePipe: c1 dialed with DialNet, c2 accepted
// from a NetListener, both on g.
func ncPipe(t *testing.T, g *loop.Group, network string) nettest.MakePipe {
	return func() (c1, c2 net.Conn, stop func(), err error) {
		addr := "127.0.0.1:0"
		if network == "unix" {
			addr = filepath.Join(t.TempDir(), "s")
		}
		ln, err := conn.ListenNet(context.Background(), g, network, addr)
		if err != nil {
			return nil, nil, nil, err
		}
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			c, err := ln.Accept()
			ch <- res{c, err}
		}()
		d, err := conn.DialNet(context.Background(), g, network, ln.Addr().String())
		if err != nil {
			ln.Close()
			return nil, nil, nil, err
		}
		r := <-ch
		if r.err != nil {
			d.Close()
			ln.Close()
			return nil, nil, nil, r.err
		}
		stop = func() {
			d.Close()
			r.c.Close()
			ln.Close()
		}
		return d, r.c, stop, nil
	}
}

// TestNetConnConformance runs x/net/nettest's net.Conn suite on the
// adapters, TCP and Unix, on both backends.
func TestNetConnConformance(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 2)
		for _, network := range []string{"tcp", "unix"} {
			t.Run(network, func(t *testing.T) {
				nettest.TestConn(t, ncPipe(t, g, network))
			})
		}
	})
}
