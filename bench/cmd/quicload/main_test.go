//go:build linux

package main

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"

	"github.com/ringloop/ringloop/bench/internal/quicwork"
)

// listen opens the server's UDP socket: package net's ("net") or
// ringloop's adapter on a backend ("uring", "epoll"), closed when the test
// ends.
func listen(t *testing.T, kind string) net.PacketConn {
	t.Helper()
	if kind == "net" {
		uc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = uc.Close() })
		return uc
	}
	b := loop.BackendEpoll
	if kind == "uring" {
		b = loop.BackendUring
	}
	g, err := loop.NewGroup(loop.WithLoops(1), loop.WithBackend(b))
	if err != nil {
		t.Skipf("%s backend unavailable: %v", kind, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Errorf("loop shutdown: %v", err)
		}
	})
	np, err := conn.ListenPacketNet(context.Background(), g, "udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = np.Close() })
	return np
}

// startServer runs serve on a quic-go listener on pc until the test ends
// and returns its address.
func startServer(t *testing.T, pc net.PacketConn, serve func(*quic.Listener)) string {
	t.Helper()
	tlsConf, err := quicwork.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: pc}
	ln, err := tr.Listen(tlsConf, quicwork.Config())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(ln)
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		_ = tr.Close()
		<-done
	})
	return pc.LocalAddr().String()
}

// TestWorkloads runs both workloads against the QUIC server on each kind
// of socket: every byte checked, requests and bytes counted, latency for
// request/response, and a GSO answer from the server for every connection.
func TestWorkloads(t *testing.T) {
	for _, kind := range []string{"net", "uring", "epoll"} {
		t.Run(kind, func(t *testing.T) {
			testutil.CheckLeaks(t)
			addr := startServer(t, listen(t, kind), quicwork.Serve)
			for _, mode := range []string{"rr", "bulk"} {
				res, err := measure(config{addr: addr, mode: mode, conns: 2, size: 100, depth: 3,
					warmup: 50 * time.Millisecond, duration: 200 * time.Millisecond})
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				if res.Errors > 0 {
					t.Fatalf("%s: %s", mode, res.FirstError)
				}
				if res.Requests == 0 || res.Bytes == 0 || res.MBps <= 0 {
					t.Errorf("%s: nothing counted: %+v", mode, res)
				}
				if mode == "rr" && (res.P50 == 0 || res.P99 < res.P50 || res.Bytes != res.Requests*100) {
					t.Errorf("rr: latency or bytes: %+v", res)
				}
				if mode == "bulk" && res.Requests != res.Bytes/100 {
					t.Errorf("bulk: %d requests for %d bytes", res.Requests, res.Bytes)
				}
				if res.ServerGSO != "on" && res.ServerGSO != "off" {
					t.Errorf("%s: server GSO %q", mode, res.ServerGSO)
				}
				// Both ends of a quic-net run are net.UDPConns on one kernel.
				if kind == "net" && res.ServerGSO != res.ClientGSO {
					t.Errorf("%s: GSO server %s, client %s", mode, res.ServerGSO, res.ClientGSO)
				}
			}
		})
	}
}

// TestChecks runs both workloads against a server that answers wrongly:
// every response with one byte changed, the bulk pattern one byte late.
// Both runs must report the error.
func TestChecks(t *testing.T) {
	testutil.CheckLeaks(t)
	addr := startServer(t, listen(t, "net"), serveWrong)
	for mode, want := range map[string]string{"rr": "differs from the request", "bulk": "differs from the pattern"} {
		res, err := measure(config{addr: addr, mode: mode, conns: 1, size: 64, depth: 1,
			warmup: 50 * time.Millisecond, duration: 50 * time.Millisecond})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if res.Errors == 0 || !strings.Contains(res.FirstError, want) {
			t.Errorf("%s: errors %d %q, want one saying %q", mode, res.Errors, res.FirstError, want)
		}
	}
}

// serveWrong is quicwork.Serve gone wrong.
func serveWrong(ln *quic.Listener) {
	for {
		c, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		go func() {
			for {
				s, err := c.AcceptStream(context.Background())
				if err != nil {
					return
				}
				go func() {
					b, err := io.ReadAll(s)
					if err != nil || len(b) == 0 {
						s.CancelWrite(quicwork.ErrCodeBadStream)
						return
					}
					switch b[0] {
					case quicwork.OpEcho:
						b[len(b)-1]++
						_, _ = s.Write(b[1:])
						_ = s.Close()
					case quicwork.OpBulk:
						for off := uint64(1); ; off += quicwork.BulkChunk {
							if _, err := s.Write(quicwork.Bulk(off, quicwork.BulkChunk)); err != nil {
								return
							}
						}
					default:
						_, _ = s.Write([]byte{'0'})
						_ = s.Close()
					}
				}()
			}
		}()
	}
}
