package interop_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
	"golang.org/x/net/ipv4"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// qlogEvents is a qlog trace that keeps what TestQUICFastPath looks at:
// the ECN validation states a connection went through, and how the
// packets it received were ECN-marked.
type qlogEvents struct {
	mu        sync.Mutex
	ecnStates []string            // each ECNStateUpdated, as "state" or "state (trigger)"
	received  map[qlog.ECN]uint64 // received packets by ECN marking
}

func newQlogEvents() *qlogEvents { return &qlogEvents{received: make(map[qlog.ECN]uint64)} }

func (e *qlogEvents) AddProducer() qlogwriter.Recorder { return qlogRecorder{e} }
func (e *qlogEvents) SupportsSchemas(string) bool      { return true }

// ecn returns the ECN states so far and the ECT(0)-marked packets
// received.
func (e *qlogEvents) ecn() (states []string, ect0 uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.ecnStates...), e.received[qlog.ECT0]
}

// qlogRecorder records a connection's events into its qlogEvents.
type qlogRecorder struct{ e *qlogEvents }

func (r qlogRecorder) RecordEvent(ev qlogwriter.Event) {
	switch ev := ev.(type) {
	case qlog.ECNStateUpdated:
		s := string(ev.State)
		if ev.Trigger != "" {
			s += " (" + ev.Trigger + ")"
		}
		r.e.mu.Lock()
		r.e.ecnStates = append(r.e.ecnStates, s)
		r.e.mu.Unlock()
	case qlog.PacketReceived:
		r.e.mu.Lock()
		r.e.received[ev.ECN]++
		r.e.mu.Unlock()
	}
}

func (qlogRecorder) Close() error { return nil }

// batchReader is the method quic-go reads through once a conn is a
// quic.OOBCapablePacketConn; without it, quic-go reads the socket's fd
// through SyscallConn instead.
type batchReader interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
}

// fastPathGaps names what pc lacks of the interfaces quic-go looks for
// before it uses GSO and ECN, or returns "".
func fastPathGaps(pc net.PacketConn) string {
	var gaps []string
	if _, ok := pc.(quic.OOBCapablePacketConn); !ok {
		gaps = append(gaps, "quic.OOBCapablePacketConn (ReadMsgUDP, WriteMsgUDP, SetReadBuffer, SyscallConn)")
	}
	if _, ok := pc.(batchReader); !ok {
		gaps = append(gaps, "ReadBatch([]ipv4.Message, int)")
	}
	return strings.Join(gaps, " and ")
}

// TestQUICFastPath: quic-go on a conn.NetPacketConn turns on what it turns
// on for a *net.UDPConn: GSO (the server connection's
// ConnectionState().GSO) and ECN, which it validates by sending ECT(0)
// marks and reading the peer's ECN counts back (the qlog state goes to
// "capable"), and reading the marks of the packets it receives (received
// packets counted as ECT(0)). A 1 MiB transfer, every byte checked, runs
// meanwhile. The subtest on net.ListenUDP is the control: the same
// assertions, on package net's socket.
func TestQUICFastPath(t *testing.T) {
	const size = 1 << 20
	run := func(t *testing.T, pc net.PacketConn) {
		events := newQlogEvents()
		conf := quicConfig()
		conf.Tracer = func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return events }
		accepted := make(chan *quic.Conn, 1)
		serverErr := quicServe(t, pc, conf, func(qc *quic.Conn) { accepted <- qc }, serveBulk)

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		client := quicDial(t, ctx, pc.LocalAddr(), quicConfig())
		if err := fetchBulk(ctx, client, 7, size); err != nil {
			t.Fatal(err)
		}
		if err := serverErr(); err != nil {
			t.Fatal(err)
		}
		server := <-accepted
		if !client.ConnectionState().GSO {
			t.Errorf("the client, on a *net.UDPConn, runs without GSO: the kernel or quic-go refuses it here")
		}

		gaps := fastPathGaps(pc)
		if !server.ConnectionState().GSO {
			msg := fmt.Sprintf("quic-go runs the server on %T without GSO (ConnectionState().GSO = false)", pc)
			if gaps != "" {
				msg += "; the conn lacks " + gaps
			}
			t.Error(msg)
		}

		// ECN validation ends when an ACK of the first marked packets
		// arrives, long before the transfer ends; wait for its verdict
		// only where it started.
		states, ect0 := events.ecn()
		if len(states) > 0 {
			testutil.Eventually(5*time.Second, func() bool {
				states, _ = events.ecn()
				last := states[len(states)-1]
				return last == string(qlog.ECNStateCapable) || strings.HasPrefix(last, string(qlog.ECNStateFailed))
			})
		}
		switch {
		case len(states) == 0:
			msg := fmt.Sprintf("quic-go runs the server on %T without ECN (it never started ECN validation)", pc)
			if gaps != "" {
				msg += "; the conn lacks " + gaps
			}
			t.Error(msg)
		case states[len(states)-1] != string(qlog.ECNStateCapable):
			t.Errorf("the server's ECN validation went %v, want it to end %q: the ECT(0) marks it sent did not reach the peer (the send path drops the IP_TOS control message?)",
				states, qlog.ECNStateCapable)
		}
		switch {
		case ect0 == 0 && gaps != "":
			t.Errorf("the server saw no packet marked ECT(0) (the client marks them): quic-go reads %T with ReadFrom, which carries no control messages, since the conn lacks %s", pc, gaps)
		case ect0 == 0:
			t.Errorf("the server saw no packet marked ECT(0) (the client marks them): ReadBatch does not hand quic-go the IP_TOS control message of the packets it reads")
		}
		t.Logf("server on %T: GSO %v, ECN states %v, received ECT(0) packets %d",
			pc, server.ConnectionState().GSO, states, ect0)
	}

	t.Run("net.ListenUDP", func(t *testing.T) {
		testutil.CheckLeaks(t)
		testutil.Watchdog(t, 60*time.Second)
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { udp.Close() })
		run(t, udp)
	})
	forBackends(t, 60*time.Second, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		run(t, listenPacketNet(t, b))
	})
}
