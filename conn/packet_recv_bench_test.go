package conn_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// recvCounter is a PacketHandler that counts datagrams and signals
// progress, on the loop.
type recvCounter struct {
	got      atomic.Int64
	progress chan struct{}
}

func (r *recvCounter) OnPacket(pc *conn.PacketConn, data []byte, from conn.Addr) {
	r.got.Add(1)
	select {
	case r.progress <- struct{}{}:
	default:
	}
}

// BenchmarkPacketRecv sends datagrams from a package-net socket to a
// socket on a loop, at most window ahead of what arrived: received through
// a PacketHandler (handler) or read by a goroutine from a NetPacketConn
// (net, ReadFrom with a 64 KiB buffer). ns/op and the process's CPU per
// datagram (both ends; the sending end does the same work in every case).
func BenchmarkPacketRecv(b *testing.B) {
	const window = 256 // within what a NetPacketConn's default inbound queue holds
	for _, be := range []loop.Backend{loop.BackendUring, loop.BackendEpoll} {
		for _, api := range []string{"handler", "net"} {
			for _, size := range []int{64, 1200} {
				name := "backend=" + be.String() + "/" + api + "/size=" + strconv.Itoa(size)
				b.Run(name, func(b *testing.B) {
					g := ctGroup(b, be, 1)
					var got func() int64
					var progress chan struct{}
					var laddr net.Addr
					if api == "handler" {
						h := &recvCounter{progress: make(chan struct{}, 1)}
						pc, err := conn.ListenPacket(context.Background(), g, "udp4", "127.0.0.1:0", h, conn.WithReadBuffer(8<<20))
						if err != nil {
							b.Skip(err)
						}
						defer func() { pc.Close(); <-pc.Done() }()
						got, progress, laddr = h.got.Load, h.progress, pc.LocalAddr()
					} else {
						np, err := conn.ListenPacketNet(context.Background(), g, "udp4", "127.0.0.1:0", conn.WithReadBuffer(8<<20))
						if err != nil {
							b.Skip(err)
						}
						defer func() { np.Close(); <-np.PacketConn().Done() }()
						var n atomic.Int64
						progress = make(chan struct{}, 1)
						go func() {
							buf := make([]byte, 65536)
							for {
								if _, _, err := np.ReadFrom(buf); err != nil {
									return
								}
								n.Add(1)
								select {
								case progress <- struct{}{}:
								default:
								}
							}
						}()
						got, laddr = n.Load, np.LocalAddr()
					}
					tx := ctUDP4(b)
					to := laddr.(*net.UDPAddr)
					msg := make([]byte, size)
					var ru0, ru1 syscall.Rusage
					syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
					b.ResetTimer()
					for sent := 0; sent < b.N; sent++ {
						for int64(sent)-got() > window {
							<-progress
						}
						if _, err := tx.WriteToUDP(msg, to); err != nil {
							b.Fatal(err)
						}
					}
					timeout := time.After(10 * time.Second)
				wait:
					for got() < int64(b.N) {
						select {
						case <-progress:
						case <-timeout:
							break wait
						}
					}
					b.StopTimer()
					syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
					cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/dgram")
					if lost := int64(b.N) - got(); lost != 0 {
						b.ReportMetric(float64(lost), "lost")
					}
				})
			}
		}
	}
}
