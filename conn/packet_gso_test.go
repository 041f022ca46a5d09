package conn_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// TestPacketUDPSegment: with WithUDPSegment(n) a write longer than n goes
// out as datagrams of n bytes (the last shorter), a shorter one whole.
func TestPacketUDPSegment(t *testing.T) {
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		g := ctGroup(t, b, 1, opts...)
		rx, pc, err := ctDialReceiver(t, g, conn.WithUDPSegment(100))
		if err != nil {
			if errors.Is(err, syscall.ENOPROTOOPT) || errors.Is(err, syscall.EINVAL) {
				t.Skipf("the kernel refuses UDP_SEGMENT: %v", err)
			}
			t.Fatal(err)
		}
		batch := make([]byte, 1050)
		for i := range batch {
			batch[i] = byte(i / 100)
		}
		pc.Write(batch)
		pc.Write([]byte("single"))
		buf := make([]byte, 2048)
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		for i := range 11 {
			n, err := rx.Read(buf)
			want := batch[i*100 : min(len(batch), i*100+100)]
			if err != nil || !bytes.Equal(buf[:n], want) {
				t.Fatalf("segment %d: %d B, %v; want %d B", i, n, err, len(want))
			}
		}
		if n, err := rx.Read(buf); err != nil || string(buf[:n]) != "single" {
			t.Fatalf("a short write: %q, %v", buf[:n], err)
		}
		if _, err := conn.DialPacket(context.Background(), g, "udp4", rx.LocalAddr().String(), newPacketRecorder(false), conn.WithUDPSegment(70000)); err == nil {
			t.Fatal("WithUDPSegment(70000) accepted")
		}
	})
}

// BenchmarkPacketSend sends 1,200-byte datagrams from a PacketConn to a
// receiving socket drained by a goroutine, one datagram per write or 16
// per write with WithUDPSegment (GSO): ns/op and the process's CPU per
// datagram (both ends; the receiving end does the same work either way).
func BenchmarkPacketSend(b *testing.B) {
	const size, per, window = 1200, 16, 512
	for _, be := range []loop.Backend{loop.BackendUring, loop.BackendEpoll} {
		for _, gso := range []bool{false, true} {
			name := "backend=" + be.String() + "/single"
			if gso {
				name = "backend=" + be.String() + "/gso16"
			}
			b.Run(name, func(b *testing.B) {
				g := ctGroup(b, be, 1)
				rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
				if err != nil {
					b.Fatal(err)
				}
				defer rx.Close()
				rx.SetReadBuffer(8 << 20)
				var got atomic.Int64
				progress := make(chan struct{}, 1) // a datagram arrived
				go func() {
					buf := make([]byte, 2048)
					for {
						if _, err := rx.Read(buf); err != nil {
							return
						}
						got.Add(1)
						select {
						case progress <- struct{}{}:
						default:
						}
					}
				}()
				var opts []conn.Option
				if gso {
					opts = append(opts, conn.WithUDPSegment(size))
				}
				pc, err := conn.DialPacket(context.Background(), g, "udp4", rx.LocalAddr().String(), newPacketRecorder(false), opts...)
				if err != nil {
					b.Skip(err)
				}
				defer func() { pc.Close(); <-pc.Done() }()
				one := make([]byte, size)
				batch := make([]byte, size*per)
				var ru0, ru1 syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
				b.ResetTimer()
				sent := 0
				for sent < b.N {
					for int64(sent)-got.Load() > window {
						<-progress
					}
					if gso {
						k := min(per, b.N-sent)
						if _, err := pc.Write(batch[:k*size]); err != nil {
							b.Fatal(err)
						}
						sent += k
					} else {
						if _, err := pc.Write(one); err != nil {
							<-progress // a full queue: let it drain
							continue
						}
						sent++
					}
				}
				timeout := time.After(10 * time.Second)
			wait:
				for got.Load() < int64(b.N) {
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
				if lost := int64(b.N) - got.Load(); lost != 0 {
					b.ReportMetric(float64(lost), "lost")
				}
			})
		}
	}
}
