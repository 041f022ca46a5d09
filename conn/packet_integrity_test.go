package conn_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/sock"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// The datagram integrity test: 1,000,000 datagrams of random sizes from 1
// to 1472 bytes, with one of 65,507 bytes (the most UDP over IPv4 carries)
// every 5,000th, echoed by a ListenPacket server to 4 clients. Each client
// keeps up to 32 datagrams in flight and checks every echo byte for byte,
// in order, against the datagram it sent; nothing may be lost, reordered
// or altered. The sockets' buffers are large enough that loopback drops
// nothing; if the kernel drops anyway, the test fails showing the drop
// counts of both ends (PacketStats.KernelDrops and the clients'), never a
// silent loss.
const (
	dgramTotal   = 1_000_000
	dgramClients = 4
	dgramWindow  = 32
	dgramBigStep = 5000
	dgramBig     = 65507
	dgramSockBuf = 8 << 20
)

// dgramPayload fills b with datagram i of client id: its length and bytes
// follow from (id, i), so the receiver regenerates what it must get back.
func dgramPayload(b []byte, id, i int) []byte {
	rng := rand.New(rand.NewPCG(uint64(id), uint64(i)))
	n := 1 + rng.IntN(1472)
	if i%dgramBigStep == dgramBigStep-1 {
		n = dgramBig
	}
	b = b[:n]
	for j := 0; j < n; j += 8 {
		v := rng.Uint64()
		for k := 0; k < 8 && j+k < n; k++ {
			b[j+k] = byte(v >> (8 * k))
		}
	}
	return b
}

func TestPacketIntegrity(t *testing.T) {
	total := dgramTotal
	if testing.Short() || accRace {
		total = 100_000 // the full count runs in the plain pass
	}
	ctDgramModes(t, func(t *testing.T, b loop.Backend, opts ...loop.Option) {
		testutil.CheckLeaks(t)
		// The default datagram buffers hold the longest datagram.
		g := ctGroup(t, b, 2, opts...)
		h := newPacketRecorder(true)
		srv := ctListenPacket(t, g, "udp4", "127.0.0.1:0", h, conn.WithReadBuffer(dgramSockBuf), conn.WithWriteBuffer(dgramSockBuf))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		per := total / dgramClients
		var wg sync.WaitGroup
		errs := make([]error, dgramClients)
		drops := make([]uint32, dgramClients)
		start := time.Now()
		for id := range dgramClients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[id], drops[id] = runDgramClient(ctx, id, per, srv.LocalAddr().(*net.UDPAddr))
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		// A send's completion may reach the loop after its datagram
		// reached the client.
		ctWaitFor(t, 5*time.Second, "the last send's completion", func() bool { return srv.Stats().Sent >= uint64(per*dgramClients) })
		st := srv.Stats()
		t.Logf("%d datagrams echoed in %v (%.0f/s); server %+v; client drops %v", per*dgramClients, elapsed.Round(time.Millisecond),
			float64(per*dgramClients)/elapsed.Seconds(), st, drops)
		for id, err := range errs {
			if err != nil {
				t.Errorf("client %d: %v (kernel drops: server %d, clients %v)", id, err, st.KernelDrops, drops)
			}
		}
		if st.Received != uint64(per*dgramClients) || st.Sent != st.Received || st.Truncated != 0 || st.WriteErrors != 0 {
			t.Errorf("server counted %+v, want %d received and sent", st, per*dgramClients)
		}
		if errs := h.errors(); len(errs) != 0 {
			t.Errorf("server errors: %v", errs[:min(len(errs), 5)])
		}
	})
}

// runDgramClient sends n datagrams to srv, up to dgramWindow ahead of the
// echoes, and checks each echo in order. It returns the first failure and
// the kernel's drop count for its socket.
func runDgramClient(ctx context.Context, id, n int, srv *net.UDPAddr) (error, uint32) {
	c, err := net.DialUDP("udp4", nil, srv)
	if err != nil {
		return err, 0
	}
	defer c.Close()
	c.SetReadBuffer(dgramSockBuf)
	c.SetWriteBuffer(dgramSockBuf)
	drops := func() uint32 {
		var d uint32
		if rc, err := c.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { d, _ = sock.SocketDrops(int(fd)) })
		}
		return d
	}
	deadline, _ := ctx.Deadline()
	c.SetDeadline(deadline)
	out := make([]byte, dgramBig)
	want := make([]byte, dgramBig)
	in := make([]byte, dgramBig+1)
	sent := 0
	for recv := 0; recv < n; recv++ {
		for sent < n && sent-recv < dgramWindow {
			if _, err := c.Write(dgramPayload(out, id, sent)); err != nil {
				return fmt.Errorf("write %d: %w", sent, err), drops()
			}
			sent++
		}
		got, err := c.Read(in)
		if err != nil {
			return fmt.Errorf("echo %d of %d (sent %d): %w", recv, n, sent, err), drops()
		}
		w := dgramPayload(want, id, recv)
		if !bytes.Equal(in[:got], w) {
			return fmt.Errorf("echo %d: %d bytes, want %d (%s)", recv, got, len(w), dgramDiff(in[:got], w)), drops()
		}
	}
	return nil, drops()
}

func dgramDiff(a, b []byte) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("first difference at byte %d", i)
		}
	}
	return "one is a prefix of the other"
}
