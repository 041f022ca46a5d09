//go:build linux

package conn

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
)

// BenchmarkResetSweep measures one reset sweep over 10,000 open TCP
// connections with a multishot receive armed: idle ones (nothing received
// since the sweep before last: a load and a compare each), and ones that
// all received bytes (a getsockopt TCP_INFO each; the sockets are
// established, so none is re-armed).
func BenchmarkResetSweep(b *testing.B) {
	const n = 10_000
	_, server := testutil.TCPPair(b)
	var r loopConns
	conns := make([]Conn, n)
	for i := range conns {
		c := &conns[i]
		c.fd, c.state = int32(server), stateOpen
		c.flags.set(flagRecvArmed)
		r.conns.add(c)
	}
	b.Run("idle", func(b *testing.B) {
		for b.Loop() {
			r.resetSweep()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/conn")
	})
	b.Run("received", func(b *testing.B) {
		for b.Loop() {
			for i := range conns {
				conns[i].resetSweepsLeft = 1
			}
			r.resetSweep()
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/conn")
	})
}

// TestTCPInfoStateByte: the reset sweep reads tcp_info's first byte as the
// socket's state: established, then TCP_CLOSE_WAIT after the peer's FIN,
// and TCP_CLOSE after its reset.
func TestTCPInfoStateByte(t *testing.T) {
	state := func(fd int) byte {
		s, err := unix.GetsockoptByte(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	client, server := testutil.TCPPair(t)
	if s := state(server); s != 1 { // TCP_ESTABLISHED
		t.Fatalf("state %d, want established (1)", s)
	}
	unix.Shutdown(client, unix.SHUT_WR)
	waitState(t, state, server, tcpCloseWait)
	lfd, addr := testutil.ListenFd(t)
	client2, closeClient := testutil.Dial(t, addr)
	server2, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(server2)
	unix.SetsockoptLinger(client2, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	unix.Write(client2, []byte("x"))
	closeClient()
	waitState(t, state, server2, tcpClose)
}

func waitState(t *testing.T, state func(int) byte, fd int, want byte) {
	t.Helper()
	if !testutil.Eventually(10*time.Second, func() bool { return state(fd) == want }) {
		t.Fatalf("fd %d: state %d, want %d", fd, state(fd), want)
	}
}
