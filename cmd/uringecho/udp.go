package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// dgramEcho sends every datagram back to its sender.
type dgramEcho struct {
	dgrams, bytes, errs atomic.Uint64
}

// OnPacket runs on the socket's loop: WriteToAddr copies data, which is
// only valid during the call, and replies to from without allocating.
func (e *dgramEcho) OnPacket(pc *conn.PacketConn, data []byte, from conn.Addr) {
	if _, err := pc.WriteToAddr(data, from); err == nil {
		e.dgrams.Add(1)
		e.bytes.Add(uint64(len(data)))
	}
}

// OnPacketError counts what did not close the socket: a truncated
// datagram, a reply the kernel refused.
func (e *dgramEcho) OnPacketError(pc *conn.PacketConn, err error) { e.errs.Add(1) }

// listenUDP opens the echo's UDP sockets: one, or one per loop (each on its
// own loop) with -reuseport.
func listenUDP(cfg config, g *loop.Group, h *dgramEcho) ([]*conn.PacketConn, error) {
	n := 1
	if cfg.reusePort {
		n = g.Len()
	}
	var pcs []*conn.PacketConn
	addr := cfg.addr
	for i := range n {
		pc, err := conn.ListenPacket(context.Background(), g, "udp", addr, h,
			conn.WithLoop(g.Loop(i)), conn.WithReusePort(cfg.reusePort), conn.WithReadBuffer(4<<20), conn.WithWriteBuffer(4<<20))
		if err != nil {
			for _, pc := range pcs {
				pc.Close()
			}
			return nil, err
		}
		pcs = append(pcs, pc)
		addr = pc.LocalAddr().String() // the others share the port
	}
	return pcs, nil
}

// reportUDPStats prints one line of counters every interval until ctx
// ends.
func reportUDPStats(ctx context.Context, w io.Writer, every time.Duration, pcs []*conn.PacketConn, g *loop.Group, h *dgramEcho) {
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastAt := h.dgrams.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n, s := h.dgrams.Load(), g.Stats().Total
			var drops, truncated uint64
			for _, pc := range pcs {
				st := pc.Stats()
				drops += st.KernelDrops
				truncated += st.Truncated
			}
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			last, lastAt = n, now
			fmt.Fprintf(w, "stats: datagrams=%d (%.0f/s) bytes=%d errors=%d truncated=%d kernel-drops=%d turns=%d completions=%d inflight=%d rebuilds=%d cq-overflows=%d cq-lost=%d\n",
				n, rate, h.bytes.Load(), h.errs.Load(), truncated, drops, s.Turns, s.Completions, s.OpsInFlight, s.Rebuilds, s.CQOverflows, s.LostCompletions)
		}
	}
}

// udpAddr is the address the banner shows.
func udpAddr(pcs []*conn.PacketConn) net.Addr { return pcs[0].LocalAddr() }
