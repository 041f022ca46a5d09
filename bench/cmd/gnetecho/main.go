//go:build linux

// Command gnetecho is the gnet v2 peer of the comparison: a multicore gnet
// engine whose OnTraffic writes back everything it has read. Multicore
// gives one event loop per CPU the process may run on (one when the harness
// pins it to a single CPU).
package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/logging"
	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/bench/internal/serve"
)

type echo struct {
	gnet.BuiltinEventEngine
	eng gnet.Engine
}

func (e *echo) OnBoot(eng gnet.Engine) gnet.Action {
	e.eng = eng
	addr, err := boundAddr(eng)
	if err != nil {
		serve.Fatal("listener address", err)
	}
	serve.Ready(addr)
	return gnet.None
}

func (e *echo) OnTraffic(c gnet.Conn) gnet.Action {
	buf, _ := c.Next(-1)
	_, _ = c.Write(buf)
	return gnet.None
}

// boundAddr reads the listener's address, which gnet does not report when
// it was given port 0.
func boundAddr(eng gnet.Engine) (string, error) {
	fd, err := eng.Dup()
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return "", err
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		return "", fmt.Errorf("unexpected listener address %T", sa)
	}
	return fmt.Sprintf("%d.%d.%d.%d:%d", in4.Addr[0], in4.Addr[1], in4.Addr[2], in4.Addr[3], in4.Port), nil
}

func main() {
	f := serve.Register()
	network := flag.String("network", "tcp", "tcp, or udp (echo each datagram to its sender)")
	serve.ParseFlags()
	stopProfile := f.StartProfile()
	defer stopProfile()
	e := &echo{}
	done := make(chan error, 1)
	go func() {
		if *network == "udp" {
			// For UDP, OnTraffic gets one datagram and Write sends the
			// reply to its sender.
			done <- gnet.Run(e, "udp4://"+f.Addr,
				gnet.WithMulticore(true),
				gnet.WithSocketRecvBuffer(4<<20),
				gnet.WithSocketSendBuffer(4<<20),
				gnet.WithLogLevel(logging.ErrorLevel))
			return
		}
		done <- gnet.Run(e, "tcp4://"+f.Addr,
			gnet.WithMulticore(true),
			gnet.WithTCPNoDelay(gnet.TCPNoDelay),
			gnet.WithLogLevel(logging.ErrorLevel))
	}()
	stop := make(chan string, 1)
	go func() { stop <- serve.Wait(f.MaxRuntime) }()
	select {
	case err := <-done:
		if err != nil {
			serve.Fatal("gnet", err)
		}
	case <-stop:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.eng.Stop(ctx)
	}
}
