package interop_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// quicALPN is the ALPN protocol of the QUIC tests.
const quicALPN = "ringloop-interop"

// quicConfig is the configuration of both ends: an idle timeout that only
// a dead peer reaches, and room for the echo test's 64 streams.
func quicConfig() *quic.Config {
	return &quic.Config{
		HandshakeIdleTimeout: 10 * time.Second,
		MaxIdleTimeout:       30 * time.Second,
		MaxIncomingStreams:   128,
	}
}

// listenPacketNet opens a conn.NetPacketConn on 127.0.0.1 on a new group
// of backend b, closed when the test ends.
func listenPacketNet(t *testing.T, b loop.Backend) *conn.NetPacketConn {
	t.Helper()
	g := newGroup(t, b, 2)
	pc, err := conn.ListenPacketNet(context.Background(), g, "udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// quicServe runs a quic-go server on pc until the test ends: each
// accepted connection's streams are handed to handle, each on a goroutine
// of its own, and the connection to onConn first, when it is not nil.
// The returned function reports the first error the server met.
func quicServe(t *testing.T, pc net.PacketConn, conf *quic.Config, onConn func(*quic.Conn), handle func(*quic.Stream) error) func() error {
	t.Helper()
	serverTLS, _ := tlsConfigs(t, quicALPN)
	tr := &quic.Transport{Conn: pc}
	ln, err := tr.Listen(serverTLS, conf)
	if err != nil {
		t.Fatalf("quic Listen: %v", err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				return // the listener closed
			}
			if onConn != nil {
				onConn(qc)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					str, err := qc.AcceptStream(context.Background())
					if err != nil {
						return // the connection ended
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := handle(str); err != nil {
							fail(err)
							str.CancelRead(1)
							str.CancelWrite(1)
						}
					}()
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		tr.Close() // closes the connections; pc stays open
		wg.Wait()
	})
	return func() error {
		mu.Lock()
		defer mu.Unlock()
		return firstErr
	}
}

// quicDial connects a client on its own net.UDPConn to addr; everything
// is closed when the test ends.
func quicDial(t *testing.T, ctx context.Context, addr net.Addr, conf *quic.Config) *quic.Conn {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	t.Cleanup(func() {
		tr.Close()
		udp.Close()
	})
	_, clientTLS := tlsConfigs(t, quicALPN)
	qc, err := tr.Dial(ctx, addr, clientTLS, conf)
	if err != nil {
		t.Fatalf("quic Dial %v: %v", addr, err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	return qc
}

// bulkRequest is what a bulk client sends on its stream: the seed of the
// pattern and the number of bytes it wants.
func bulkRequest(seed uint32, size int64) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint32(b, seed)
	binary.BigEndian.PutUint64(b[4:], uint64(size))
	return b
}

// serveBulk answers a bulkRequest: it writes the pattern of the seed, size
// bytes, then closes its side of the stream.
func serveBulk(str *quic.Stream) error {
	var req [12]byte
	if _, err := io.ReadFull(str, req[:]); err != nil {
		return fmt.Errorf("bulk server: request: %v", err)
	}
	seed := binary.BigEndian.Uint32(req[:])
	size := int64(binary.BigEndian.Uint64(req[4:]))
	buf := make([]byte, 32<<10)
	for off := int64(0); off < size; {
		n := int(min(int64(len(buf)), size-off))
		pattern(buf[:n], seed, off)
		if _, err := str.Write(buf[:n]); err != nil {
			return fmt.Errorf("bulk server: seed %d: write at %d: %v", seed, off, err)
		}
		off += int64(n)
	}
	return str.Close()
}

// fetchBulk asks for size bytes of seed's pattern on a new stream of qc
// and checks every byte and the end of the stream.
func fetchBulk(ctx context.Context, qc *quic.Conn, seed uint32, size int64) error {
	str, err := qc.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("client %d: OpenStreamSync: %v", seed, err)
	}
	if _, err := str.Write(bulkRequest(seed, size)); err != nil {
		return fmt.Errorf("client %d: request: %v", seed, err)
	}
	if err := str.Close(); err != nil {
		return fmt.Errorf("client %d: close the send side: %v", seed, err)
	}
	if d, ok := ctx.Deadline(); ok {
		str.SetReadDeadline(d)
	}
	buf := make([]byte, 64<<10)
	var off int64
	for {
		n, err := str.Read(buf)
		if bad := checkPattern(buf[:n], seed, off); bad >= 0 {
			return fmt.Errorf("client %d: wrong byte at offset %d", seed, bad)
		}
		off += int64(n)
		if off > size {
			return fmt.Errorf("client %d: %d bytes, more than the %d asked for", seed, off, size)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("client %d: read at offset %d of %d: %v", seed, off, size, err)
		}
	}
	if off != size {
		return fmt.Errorf("client %d: stream ended after %d bytes, want %d", seed, off, size)
	}
	return nil
}

// TestQUICBulk: a quic-go server on a conn.NetPacketConn sends 4 MiB
// (512 KiB under -short) on one stream to each of 16 concurrent clients on
// package net's UDP sockets; every byte is checked, every connection
// completes, all within a bound.
func TestQUICBulk(t *testing.T) {
	const clients = 16
	size := int64(4 << 20)
	if testing.Short() {
		size = 512 << 10
	}
	forBackends(t, 120*time.Second, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		pc := listenPacketNet(t, b)
		serverErr := quicServe(t, pc, quicConfig(), nil, serveBulk)

		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		start := time.Now()
		errs := make(chan error, clients)
		var wg sync.WaitGroup
		for i := range clients {
			qc := quicDial(t, ctx, pc.LocalAddr(), quicConfig())
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- fetchBulk(ctx, qc, uint32(i+1), size)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if err := serverErr(); err != nil {
			t.Error(err)
		}
		t.Logf("%d clients × %d KiB in %v; datagrams dropped by the adapter's inbound queue: %d",
			clients, size>>10, time.Since(start).Round(time.Millisecond), pc.Dropped())
	})
}

// serveEcho echoes a stream until the client closes its side, then closes
// its own.
func serveEcho(str *quic.Stream) error {
	if _, err := io.Copy(str, str); err != nil {
		return fmt.Errorf("echo server: stream %d: %v", str.StreamID(), err)
	}
	return str.Close()
}

// TestQUICEcho: 64 concurrent streams on one connection to a quic-go
// server on a conn.NetPacketConn, each making 16 request/response rounds
// (1 byte to 32 KiB) with an echo handler, every byte checked.
func TestQUICEcho(t *testing.T) {
	const streams, rounds = 64, 16
	forBackends(t, 60*time.Second, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		pc := listenPacketNet(t, b)
		serverErr := quicServe(t, pc, quicConfig(), nil, serveEcho)

		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		qc := quicDial(t, ctx, pc.LocalAddr(), quicConfig())
		errs := make(chan error, streams)
		var wg sync.WaitGroup
		for s := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- echoRounds(ctx, qc, uint32(s+1), rounds)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if err := serverErr(); err != nil {
			t.Error(err)
		}
	})
}

// echoRounds opens a stream on qc and makes rounds request/response
// rounds on it, checking each echo, then closes its side and waits for
// the server's end of stream.
func echoRounds(ctx context.Context, qc *quic.Conn, seed uint32, rounds int) error {
	str, err := qc.OpenStreamSync(ctx)
	if err != nil {
		return fmt.Errorf("stream %d: OpenStreamSync: %v", seed, err)
	}
	if d, ok := ctx.Deadline(); ok {
		str.SetDeadline(d)
	}
	var off int64
	for i := range rounds {
		size := 1 << ((int(seed) + i) % 16) // 1 B .. 32 KiB
		req := make([]byte, size)
		pattern(req, seed, off)
		if _, err := str.Write(req); err != nil {
			return fmt.Errorf("stream %d: round %d: write: %v", seed, i, err)
		}
		resp := make([]byte, size)
		if _, err := io.ReadFull(str, resp); err != nil {
			return fmt.Errorf("stream %d: round %d: read: %v", seed, i, err)
		}
		if bad := checkPattern(resp, seed, off); bad >= 0 {
			return fmt.Errorf("stream %d: round %d: wrong byte at stream offset %d", seed, i, bad)
		}
		off += int64(size)
	}
	if err := str.Close(); err != nil {
		return fmt.Errorf("stream %d: close: %v", seed, err)
	}
	if n, err := str.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("stream %d: after the last round: %d bytes, %v; want io.EOF", seed, n, err)
	}
	return nil
}
