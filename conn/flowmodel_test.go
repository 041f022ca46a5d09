package conn_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// pipeliner answers each line with answer bytes. Unless naive, it stops
// consuming when its connection turns unwritable, as docs/conn.md teaches,
// and, with manual, pauses reading itself and resumes on
// OnWritabilityChanged(true). It records the most its connection ever
// queued.
type pipeliner struct {
	conn.NopHandler
	answer  []byte
	naive   bool
	manual  bool
	scanned int
	most    atomic.Int64
	opened  chan *conn.Conn
}

func (h *pipeliner) OnOpen(c *conn.Conn) { offer(h.opened, c) }

// offer sends c on ch if it has room (nil: nowhere).
func offer(ch chan *conn.Conn, c *conn.Conn) {
	select {
	case ch <- c:
	default:
	}
}

func (h *pipeliner) OnRead(c *conn.Conn, data []byte) int {
	consumed := 0
	for {
		if !h.naive && !c.Writable() {
			if h.manual {
				c.PauseRead()
			}
			return consumed
		}
		i := bytes.IndexByte(data[consumed+h.scanned:], '\n')
		if i < 0 {
			h.scanned = len(data) - consumed
			return consumed
		}
		c.Write(h.answer)
		h.note(c)
		consumed += h.scanned + i + 1
		h.scanned = 0
	}
}

func (h *pipeliner) note(c *conn.Conn) {
	if n := int64(c.Buffered()); n > h.most.Load() {
		h.most.Store(n)
	}
}

func (h *pipeliner) OnWritabilityChanged(c *conn.Conn, writable bool) {
	if writable && h.manual {
		c.ResumeRead()
	}
}

// naiveLines is an OnData handler that answers every newline it is given,
// never looking at writability.
type naiveLines struct {
	conn.NopHandler
	answer []byte
	most   atomic.Int64
	opened chan *conn.Conn
}

func (h *naiveLines) OnOpen(c *conn.Conn) { offer(h.opened, c) }

func (h *naiveLines) OnData(c *conn.Conn, data []byte) {
	for range bytes.Count(data, []byte{'\n'}) {
		c.Write(h.answer)
	}
	if n := int64(c.Buffered()); n > h.most.Load() {
		h.most.Store(n)
	}
}

// TestPipelinedRequestsResume: 16 requests in one write to a ReadHandler
// that stops consuming when its connection is unwritable, each answered
// with 100 KB (past the high-water mark), get 16 answers, on default
// options: the input it left is handed to it again when the connection
// drains, without waiting for the peer to send more. The same with a
// handler that pauses and resumes reading itself, and with
// WithPauseReadWhenUnwritable(true).
func TestPipelinedRequestsResume(t *testing.T) {
	cases := []struct {
		name   string
		manual bool
		opts   []conn.Option
	}{
		{"default", false, nil},
		{"PauseRead", true, nil},
		{"WithPauseReadWhenUnwritable", false, []conn.Option{conn.WithPauseReadWhenUnwritable(true)}},
	}
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				const requests, size = 16, 100_000
				h := &pipeliner{answer: bytes.Repeat([]byte("a"), size), manual: tc.manual}
				srv, err := conn.ListenFunc(t.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler { return h }, tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				nc, err := net.Dial("tcp", srv.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				if _, err := nc.Write(bytes.Repeat([]byte("GET\n"), requests)); err != nil {
					t.Fatal(err)
				}
				nc.SetReadDeadline(time.Now().Add(20 * time.Second))
				n, err := io.ReadFull(nc, make([]byte, requests*size))
				if err != nil {
					t.Fatalf("read %d of %d answer bytes: %v", n, requests*size, err)
				}
			})
		}
	})
}

// TestAnswersPauseWithinReceive: a handler that answers every newline of
// a receive with 4 KiB, never looking at writability, to a peer that sends
// 1,000 newlines in one write and never reads, queues no more than the
// mark where reading pauses plus one answer: the connection hands it the
// receive in pieces its answers fit, once the server has seen how much its
// handlers answer (a first exchange shows it), and keeps the rest for when
// the connection drains. Both the OnData and the ReadHandler forms.
func TestAnswersPauseWithinReceive(t *testing.T) {
	const answer = 4 << 10
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		for _, form := range []string{"OnData", "OnRead"} {
			t.Run(form, func(t *testing.T) {
				var most *atomic.Int64
				var h conn.Handler
				opened := make(chan *conn.Conn, 1)
				if form == "OnData" {
					nh := &naiveLines{answer: bytes.Repeat([]byte("b"), answer), opened: opened}
					h, most = nh, &nh.most
				} else {
					ph := &pipeliner{answer: bytes.Repeat([]byte("b"), answer), naive: true, opened: opened}
					h, most = ph, &ph.most
				}
				srv, err := conn.ListenFunc(t.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler { return h },
					conn.WithWriteBuffer(16<<10), conn.WithPauseReadWhenUnwritable(true))
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				nc, err := net.Dial("tcp", srv.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				nc.(*net.TCPConn).SetReadBuffer(16 << 10)
				// A first exchange: the server learns how much it answers.
				nc.Write([]byte("\n\n"))
				nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(nc, make([]byte, 2*answer)); err != nil {
					t.Fatal(err)
				}
				most.Store(0)
				nc.Write(bytes.Repeat([]byte("\n"), 1000))
				// The connection pauses; wait for its queue to stop growing
				// at the mark, then check what it held at most.
				c := <-opened
				ctWaitFor(t, 10*time.Second, "the connection to pause with answers queued", func() bool {
					return !c.Writable() && c.Buffered() > 0
				})
				ctTurnPasses(t, c.Loop())
				if m := most.Load(); m > conn.DefaultHighWaterMark+answer {
					t.Errorf("queued %d bytes at most; the mark where reading pauses is %d, one answer %d", m, conn.DefaultHighWaterMark, answer)
				}
				// Every answer arrives once the peer reads.
				nc.SetReadDeadline(time.Now().Add(20 * time.Second))
				if n, err := io.ReadFull(nc, make([]byte, 1000*answer)); err != nil {
					t.Fatalf("read %d of %d answer bytes: %v", n, 1000*answer, err)
				}
			})
		}
	})
}

// wakeful keeps every line until Wake, then answers all it holds.
type wakeful struct {
	conn.NopHandler
	release atomic.Bool
	c       chan *conn.Conn
}

func (h *wakeful) OnOpen(c *conn.Conn) { h.c <- c }

func (h *wakeful) OnRead(c *conn.Conn, data []byte) int {
	if !h.release.Load() {
		return 0
	}
	c.Write([]byte(fmt.Sprintf("%d\n", bytes.Count(data, []byte{'\n'}))))
	return len(data)
}

// TestWakeRunsOnReadOnKept: Wake runs OnRead again on the input the
// handler left, without new bytes from the peer; on a handler without
// OnRead it fails.
func TestWakeRunsOnReadOnKept(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := &wakeful{c: make(chan *conn.Conn, 1)}
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		defer srv.Close()
		nc, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		c := <-h.c
		nc.Write([]byte("a\nb\nc\n"))
		ctWaitFor(t, 10*time.Second, "the three lines kept", func() bool {
			kept, _ := conn.KeptOnLoop(c.Loop())
			return kept == 6
		})
		h.release.Store(true)
		if err := c.Wake(); err != nil {
			t.Fatal(err)
		}
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(nc).ReadString('\n')
		if err != nil || line != "3\n" {
			t.Fatalf("after Wake read %q, %v; want \"3\\n\"", line, err)
		}
		other := ctNewServerHandler(t, nil)
		srv2 := ctListen(t, "tcp", "127.0.0.1:0", g, other)
		defer srv2.Close()
		_, oc, _ := ctDialAccepted(t, srv2, other)
		if err := oc.Wake(); !errors.Is(err, conn.ErrInvalidOption) {
			t.Errorf("Wake on a handler without OnRead: %v, want ErrInvalidOption", err)
		}
	})
}

// TestWriteWaitSlowsWriters: 32 goroutines writing 100 KiB records to one
// connection with WriteWait, to a peer that reads slowly, all succeed:
// they wait for room instead of passing the outbound limit, every record
// arrives whole and in each writer's order, and the queue stays within the
// high-water mark plus one record per writer. On a loop goroutine WriteWait
// fails at once with loop.ErrInLoop.
func TestWriteWaitSlowsWriters(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := ctNewServerHandler(t, nil)
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h, conn.WithOutboundLimit(4<<20))
		defer srv.Close()
		nc, c, _ := ctDialAccepted(t, srv, h)
		defer nc.Close()
		const writers, records, size = 32, 8, 100 << 10
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		var most atomic.Int64
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := make([]byte, size)
				for i := range records {
					binary.BigEndian.PutUint32(rec, uint32(w))
					binary.BigEndian.PutUint32(rec[4:], uint32(i))
					if _, err := c.WriteWait(context.Background(), rec); err != nil {
						errs <- err
						return
					}
					if n := int64(c.Buffered()); n > most.Load() {
						most.Store(n)
					}
				}
			}()
		}
		// The peer reads slowly: 64 KiB at a time, with a pause per read
		// until the writers are done, then the rest at once.
		next := make([]int, writers)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		r := bufio.NewReaderSize(nc, 64<<10)
		rec := make([]byte, size)
		nc.SetReadDeadline(time.Now().Add(60 * time.Second))
		for got := 0; got < writers*records; got++ {
			select {
			case <-done:
			default:
				time.Sleep(time.Millisecond)
			}
			if _, err := io.ReadFull(r, rec); err != nil {
				t.Fatalf("record %d: %v", got, err)
			}
			w, i := binary.BigEndian.Uint32(rec), binary.BigEndian.Uint32(rec[4:])
			if w >= writers || int(i) != next[w] {
				t.Fatalf("record %d is writer %d's %d, want its %d", got, w, i, next[min(w, writers-1)])
			}
			next[w]++
		}
		<-done
		close(errs)
		for err := range errs {
			t.Errorf("WriteWait: %v", err)
		}
		if m := most.Load(); m > conn.DefaultHighWaterMark+writers*size {
			t.Errorf("queued %d bytes at most, want at most the high-water mark and one record per writer", m)
		}
		inLoop := make(chan error, 1)
		c.Loop().Execute(func() {
			_, err := c.WriteWait(context.Background(), []byte("x"))
			inLoop <- err
		})
		if err := <-inLoop; !errors.Is(err, loop.ErrInLoop) {
			t.Errorf("WriteWait on the loop: %v, want ErrInLoop", err)
		}
	})
}

// limited answers a line too long with an error line, as a Redis server
// answers "-ERR", and reports how its connection closed.
type limited struct {
	lineKeeper
	heard chan error
}

func (h *limited) OnLimit(c *conn.Conn, err error) {
	h.heard <- err
	c.Write([]byte("-ERR line too long\r\n"))
}

// TestLimitHandlerAnswers: a frame past the inbound limit ends only its
// connection, after OnLimit has written an answer the peer reads; OnClose
// reports ErrInboundLimit.
func TestLimitHandlerAnswers(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := &limited{lineKeeper: lineKeeper{closed: make(chan error, 1)}, heard: make(chan error, 1)}
		srv, err := conn.ListenFunc(t.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler { return h },
			conn.WithInboundLimit(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		nc, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		// 128 KiB without a newline, then nothing: the peer waits for
		// its answer.
		if _, err := nc.Write(bytes.Repeat([]byte("x"), 128<<10)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-h.heard:
			if !errors.Is(err, conn.ErrInboundLimit) {
				t.Errorf("OnLimit %v, want ErrInboundLimit", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("OnLimit was not called")
		}
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(nc).ReadString('\n')
		if line != "-ERR line too long\r\n" {
			t.Errorf("read %q, %v; want the handler's answer", line, err)
		}
		if err := <-h.closed; !errors.Is(err, conn.ErrInboundLimit) {
			t.Errorf("OnClose %v, want ErrInboundLimit", err)
		}
	})
}

// closer closes its connection inside OnRead, leaving what it was given.
type closer struct{ conn.NopHandler }

func (closer) OnRead(c *conn.Conn, data []byte) int { c.Close(); return 0 }

// TestKeptAccounting: the loop's count of kept bytes holds the bytes kept,
// not the buffers' room: a ReadHandler that consumed its partial line
// counts nothing while its buffer stays. A connection that closes inside
// OnRead leaves nothing counted and, its loop past its budget, pauses or
// closes nobody else for the bytes it left.
func TestKeptAccounting(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		const budget = 64 << 10
		g := ctGroup(t, b, 1, loop.WithBufferBudget(budget, 0))
		lk := &lineKeeper{closed: make(chan error, 1)}
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, lk)
		defer srv.Close()
		nc, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.Write(bytes.Repeat([]byte("p"), 10<<10))
		ctWaitFor(t, 10*time.Second, "the partial line kept", func() bool {
			kept, keepers := conn.KeptOnLoop(g.Loop(0))
			return kept == 10<<10 && keepers == 1
		})
		nc.Write([]byte("\n"))
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(nc, make([]byte, 3)); err != nil {
			t.Fatal(err)
		}
		if kept, keepers := conn.KeptOnLoop(g.Loop(0)); kept != 0 || keepers != 0 {
			t.Errorf("after the line was consumed: %d bytes kept by %d connections, want none", kept, keepers)
		}
		// A keeper holding 60 KiB for long, just under the budget.
		nc.Write(bytes.Repeat([]byte("k"), 60<<10))
		ctWaitFor(t, 10*time.Second, "60 KiB kept", func() bool {
			kept, _ := conn.KeptOnLoop(g.Loop(0))
			return kept == 60<<10
		})
		time.Sleep(2 * conn.KeptStallAge)

		srv2 := ctListen(t, "tcp", "127.0.0.1:0", g, closer{})
		defer srv2.Close()
		for range 4 {
			nc2, err := net.Dial("tcp", srv2.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			nc2.Write(bytes.Repeat([]byte("q"), 32<<10))
			nc2.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := nc2.Read(make([]byte, 1)); err == nil {
				t.Fatal("the connection that closed itself answered")
			}
			nc2.Close()
		}
		ctTurnPasses(t, g.Loop(0))
		if kept, keepers := conn.KeptOnLoop(g.Loop(0)); kept != 60<<10 || keepers != 1 {
			t.Errorf("after connections closed inside OnRead: %d bytes kept by %d connections, want only the keeper's 60 KiB", kept, keepers)
		}
		if n := conn.BudgetPausedOnLoop(g.Loop(0)); n != 0 {
			t.Errorf("%d connections paused for bytes nobody keeps", n)
		}
		ctNotClosed(t, lk.closed, "the keeper closed")
	})
}

// TestNetConnsInKeptBudget: NetConns whose readers stall, past their loop's
// budget of kept bytes, beside a callback connection keeping a few bytes,
// are paused, never reset: every byte reaches their readers once they read.
func TestNetConnsInKeptBudget(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		// A NetConn whose reader stalled at once receives a few KiB
		// ahead of it (one buffer, doubling only while its reader
		// takes them): sixteen pass a budget of 32 KiB.
		const budget = 32 << 10
		g := ctGroup(t, b, 1, loop.WithBufferBudget(budget, 0))
		lk := &lineKeeper{closed: make(chan error, 1)}
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, lk)
		defer srv.Close()
		small, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer small.Close()
		small.Write([]byte("twenty bytes, no end"))

		ln, err := conn.ListenNet(t.Context(), g, "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		const peers, each = 16, 256 << 10
		// Readers stall until the loop has passed its budget, then read
		// everything. Accepting may pause meanwhile (the loop passes twice
		// its budget), so each is served as it is accepted.
		start := make(chan struct{})
		results := make(chan error, peers)
		go func() {
			for range peers {
				c, err := ln.Accept()
				if err != nil {
					results <- err
					return
				}
				go func() {
					defer c.Close()
					<-start
					c.SetReadDeadline(time.Now().Add(30 * time.Second))
					n, err := io.ReadFull(c, make([]byte, each))
					if err != nil {
						err = fmt.Errorf("read %d of %d: %w", n, each, err)
					}
					results <- err
				}()
			}
		}()
		payload := bytes.Repeat([]byte("n"), each)
		for range peers {
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			go nc.Write(payload) // blocks where the server stops reading
		}
		ctWaitFor(t, 10*time.Second, "the loop past its budget", func() bool {
			kept, _ := conn.KeptOnLoop(g.Loop(0))
			return kept > budget
		})
		close(start)
		for range peers {
			select {
			case err := <-results:
				if err != nil {
					t.Fatalf("a NetConn: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the NetConns' readers did not finish")
			}
		}
		ctNotClosed(t, lk.closed, "the callback connection closed")
	})
}

// TestOverloadStopsAccepting: when pausing does not hold a loop's kept bytes
// under four times its budget, its server stops accepting, and the connections
// that arrive meanwhile wait in the kernel's accept queue; once the total
// drains they are accepted and served, and no connection was reset.
func TestOverloadStopsAccepting(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		// Past its budget a loop's receives take one buffer (4 KiB): the
		// flood keeps at least that per peer, past four times the budget.
		const budget = 8 << 10
		g := ctGroup(t, b, 1, loop.WithBufferBudget(budget, 0))
		const flood = 24
		closed := make(chan error, flood)
		srv, err := conn.ListenFunc(t.Context(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler {
			return &lineKeeper{closed: closed}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		// A flood of peers, each keeping what it sent before it could
		// pause (its first receive, several KiB): past four times the
		// budget.
		var peers []net.Conn
		for range flood {
			nc, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			peers = append(peers, nc)
			go nc.Write(bytes.Repeat([]byte("y"), 64<<10))
		}
		ctWaitFor(t, 10*time.Second, "the loop overloaded", func() bool { return conn.OverloadedLoop(g.Loop(0)) })
		// An accept armed before the overload may take one more
		// connection; then accepting pauses.
		first, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		ctWaitFor(t, 10*time.Second, "accepting paused", func() bool { return srv.Stats().Overloads >= 1 })
		accepted := srv.Stats().Accepted
		late, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer late.Close()
		late.Write([]byte("late\n"))
		overloads := srv.Stats().Overloads
		ctWaitFor(t, 10*time.Second, "accepting still paused", func() bool { return srv.Stats().Overloads >= overloads+2 })
		if n := srv.Stats().Accepted; n != accepted {
			t.Fatalf("accepted %d connections while overloaded", n-accepted)
		}
		for _, nc := range peers {
			nc.Close()
		}
		late.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 8)
		if n, err := late.Read(buf); err != nil || string(buf[:n]) != "ok\n" {
			t.Fatalf("the connection that waited: read %q, %v; want its answer", buf[:n], err)
		}
		for range flood {
			if err := <-closed; err != nil && !errors.Is(err, io.EOF) {
				t.Errorf("a peer's connection closed with %v", err)
			}
		}
	})
}

// TestPausedPeerGoneCloses: a connection whose reading is paused has no
// receive armed, yet its peer's reset still closes it (the reset sweep
// looks at paused connections), and one paused for its loop's budget
// closes when its peer sends its FIN.
func TestPausedPeerGoneCloses(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := ctNewServerHandler(t, nil)
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		defer srv.Close()
		nc, c, ev := ctDialAccepted(t, srv, h)
		if err := c.PauseRead(); err != nil {
			t.Fatal(err)
		}
		ctTurnPasses(t, c.Loop())
		nc.(*net.TCPConn).SetLinger(0)
		nc.Close() // a reset
		if err := ev.wait(t); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("OnClose %v, want ECONNRESET", err)
		}

		// Paused for the budget, then the peer's FIN.
		bg := ctGroup(t, b, 1, loop.WithBufferBudget(64<<10, 0))
		lk := &lineKeeper{closed: make(chan error, 1)}
		bsrv := ctListen(t, "tcp", "127.0.0.1:0", bg, lk)
		defer bsrv.Close()
		pc, err := net.Dial("tcp", bsrv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		pc.Write(bytes.Repeat([]byte("y"), 100<<10))
		ctWaitFor(t, 10*time.Second, "100 KiB kept", func() bool {
			kept, _ := conn.KeptOnLoop(bg.Loop(0))
			return kept == 100<<10
		})
		time.Sleep(conn.KeptStallAge)
		pc.Write([]byte("y"))
		ctWaitFor(t, 10*time.Second, "the keeper paused", func() bool { return conn.BudgetPausedOnLoop(bg.Loop(0)) == 1 })
		pc.Close() // a FIN
		select {
		case err := <-lk.closed:
			if err != io.EOF {
				t.Errorf("OnClose %v, want io.EOF", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the paused connection outlived its peer's FIN")
		}
	})
}
