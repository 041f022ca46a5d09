package conn_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// Close in the middle of concurrent writes: every record whose Write
// returned nil reaches the peer, whole and in its writer's order, and the
// stream then ends with an orderly FIN, however the close is made (from a
// goroutine, from a task on the loop, from OnWritabilityChanged while a
// send completes, or by the peer's FIN once the queue drained). CloseWrite
// from OnWritabilityChanged likewise sends every accepted record first.
// Half the writers write one record per call, the others four per Writev
// (64 KiB, copied outside the connection's lock); a NetConn's writers the
// same through its Write.

const (
	clWriters = 4        // goroutines writing to one connection
	clRecord  = 16 << 10 // bytes per record
	clRecords = 24       // records per writer and run (at most 1.5 MiB a run)
	clBatch   = 4        // records per call of the writers that batch: 64 KiB, spliceMin
)

// clFill fills rec as record seq of writer id: the two numbers, then a
// pattern of both.
func clFill(rec []byte, id, seq int) {
	binary.LittleEndian.PutUint32(rec[0:4], uint32(id))
	binary.LittleEndian.PutUint32(rec[4:8], uint32(seq))
	for i := 8; i < len(rec); i++ {
		rec[i] = byte(id*131 + seq*31 + i*7 + i>>8)
	}
}

// clRead reads records from peer until EOF and returns how many of each
// writer arrived; a record out of its writer's order, a damaged one, a
// partial one or an error other than EOF fails.
func clRead(peer net.Conn) (got [clWriters]int, err error) {
	r := bufio.NewReaderSize(peer, 64<<10)
	rec := make([]byte, clRecord)
	want := make([]byte, clRecord)
	for k := 0; ; k++ {
		n, err := io.ReadFull(r, rec)
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return got, fmt.Errorf("record %d: %d bytes, then %w", k, n, err)
		}
		id, seq := int(binary.LittleEndian.Uint32(rec[0:4])), int(binary.LittleEndian.Uint32(rec[4:8]))
		if id >= clWriters || seq != got[id] {
			return got, fmt.Errorf("record %d is writer %d's record %d; expected its record %d", k, id, seq, got[min(id, clWriters-1)])
		}
		clFill(want, id, seq)
		if string(rec) != string(want) {
			return got, fmt.Errorf("record %d (writer %d's record %d) is damaged", k, id, seq)
		}
		got[id]++
	}
}

// clHandler is the writing connection's handler: it wakes the writers
// waiting for writability and can close the connection from
// OnWritabilityChanged.
type clHandler struct {
	conn.NopHandler
	mu        sync.Mutex
	writable  chan struct{} // closed and replaced at every report of writable
	closeHere atomic.Bool   // Close in the next OnWritabilityChanged(true)
	shutHere  bool          // ... CloseWrite instead
	closedBy  atomic.Bool   // ... and it did
	stop      atomic.Bool   // writers stop waiting for writability
	closed    chan error    // OnClose's error
}

func newCLHandler() *clHandler {
	return &clHandler{writable: make(chan struct{}), closed: make(chan error, 1)}
}

func (h *clHandler) OnWritabilityChanged(c *conn.Conn, w bool) {
	if !w {
		return
	}
	if h.closeHere.Load() && !h.closedBy.Swap(true) {
		close := c.Close
		if h.shutHere {
			close = c.CloseWrite
		}
		if err := close(); err != nil {
			panic(fmt.Sprintf("closing in OnWritabilityChanged: %v", err))
		}
	}
	h.mu.Lock()
	close(h.writable)
	h.writable = make(chan struct{})
	h.mu.Unlock()
}

func (h *clHandler) OnClose(_ *conn.Conn, err error) {
	h.stop.Store(true)
	h.closed <- err
}

// waitWritable waits until c is writable or the writers are told to stop.
func (h *clHandler) waitWritable(c *conn.Conn) {
	for !c.Writable() && !h.stop.Load() {
		h.mu.Lock()
		ch := h.writable
		h.mu.Unlock()
		if c.Writable() {
			return
		}
		select {
		case <-ch:
		case <-time.After(20 * time.Millisecond): // Close stops the reports
		}
	}
}

func TestCloseKeepsAcceptedWrites(t *testing.T) {
	runs := 40
	if testing.Short() {
		runs = 8
	}
	modes := []struct {
		name    string
		netConn bool
		how     string // goroutine, task, writable, writable-shut, peer-fin
	}{
		{"conn/goroutine", false, "goroutine"},
		{"conn/task", false, "task"},
		{"conn/writable", false, "writable"},
		{"conn/writable-shut", false, "writable-shut"},
		{"conn/peer-fin", false, "peer-fin"},
		{"netconn/goroutine", true, "goroutine"},
		{"netconn/task", true, "task"},
	}
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		ln := testutil.Loopback(t)
		for _, m := range modes {
			t.Run(m.name, func(t *testing.T) {
				for run := range runs {
					if !clRun(t, g, ln, m.netConn, m.how, run) {
						return
					}
				}
			})
		}
	})
}

// clRun is one connection of TestCloseKeepsAcceptedWrites; false: it
// failed.
func clRun(t *testing.T, g *loop.Group, ln net.Listener, netConn bool, how string, run int) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Small socket buffers keep most of each run in the outbound queue
	// when the close comes.
	opts := []conn.Option{conn.WithWriteBuffer(32 << 10), conn.WithOutboundLimit(64 << 20)}
	h := newCLHandler()
	h.shutHere = how == "writable-shut"
	var (
		c   *conn.Conn
		nc  *conn.NetConn
		err error
	)
	if netConn {
		nc, err = conn.DialNet(ctx, g, "tcp", ln.Addr().String(), opts...)
		if nc != nil {
			c = nc.Conn()
		}
	} else {
		c, err = conn.Dial(ctx, g, "tcp", ln.Addr().String(), h, opts...)
	}
	if err != nil {
		t.Fatalf("run %d: dial: %v", run, err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	peer.(*net.TCPConn).SetReadBuffer(32 << 10)
	peer.SetDeadline(time.Now().Add(20 * time.Second))

	// The close comes after a random number of accepted records.
	threshold := int64(1 + rand.IntN(clWriters*clRecords))
	trigger := make(chan struct{})
	var total atomic.Int64
	closeNow := func() error {
		if netConn {
			return nc.Close()
		}
		return c.Close()
	}
	var closer sync.WaitGroup
	closer.Add(1)
	go func() {
		defer closer.Done()
		<-trigger
		var err error
		switch how {
		case "goroutine":
			err = closeNow()
		case "task":
			done := make(chan error, 1)
			if err = c.Loop().Execute(func() { done <- closeNow() }); err == nil {
				err = <-done
			}
		case "writable", "writable-shut":
			h.closeHere.Store(true)
		case "peer-fin":
			err = peer.(*net.TCPConn).CloseWrite()
		}
		if err != nil {
			t.Errorf("run %d: close (%s): %v", run, how, err)
		}
	}()

	type result struct {
		got [clWriters]int
		err error
	}
	read := make(chan result, 1)
	go func() {
		got, err := clRead(peer)
		// The end of this side: a connection that only shut down its
		// sending side (writable-shut) closes on it.
		peer.(*net.TCPConn).CloseWrite()
		read <- result{got, err}
	}()

	var accepted [clWriters]int
	var writers sync.WaitGroup
	for id := range clWriters {
		writers.Add(1)
		go func() {
			defer writers.Done()
			// Odd writers hand over clBatch records per call, a write
			// large enough to be copied outside the connection's lock.
			batch := 1
			if id%2 == 1 {
				batch = clBatch
			}
			buf := make([]byte, batch*clRecord)
			for seq := 0; seq < clRecords; seq += batch {
				recs := make([][]byte, batch)
				for k := range recs {
					recs[k] = buf[k*clRecord : (k+1)*clRecord]
					clFill(recs[k], id, seq+k)
				}
				var err error
				switch {
				case netConn:
					_, err = nc.Write(buf)
				case batch > 1:
					h.waitWritable(c)
					_, err = c.Writev(recs)
				default:
					h.waitWritable(c)
					_, err = c.Write(buf)
				}
				if err != nil {
					if !errors.Is(err, net.ErrClosed) && !(how == "writable-shut" && errors.Is(err, syscall.EPIPE)) {
						t.Errorf("run %d: writer %d's write of records %d+%d: %v", run, id, seq, batch, err)
					}
					return
				}
				accepted[id] += batch
				if n := total.Add(int64(batch)); n >= threshold && n-int64(batch) < threshold {
					close(trigger)
				}
			}
		}()
	}
	writers.Wait()
	closer.Wait()
	if h.closeHere.Load() && !h.closedBy.Swap(true) {
		// No report of writability came after the trigger: close here.
		if h.shutHere {
			c.CloseWrite()
		} else {
			c.Close()
		}
	}

	var res result
	select {
	case res = <-read:
	case <-time.After(20 * time.Second):
		t.Fatalf("run %d: the peer read no end within 20s", run)
	}
	var closeErr error
	if netConn {
		_, closeErr = c.CloseFuture().Wait(ctx)
	} else {
		select {
		case closeErr = <-h.closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d: no OnClose within 10s", run)
		}
	}
	ok := true
	if res.err != nil {
		t.Errorf("run %d (close after %d records): peer: %v", run, threshold, res.err)
		ok = false
	}
	if res.got != accepted {
		t.Errorf("run %d (close after %d records): records per writer accepted %v, arrived %v", run, threshold, accepted, res.got)
		ok = false
	}
	wantErr := error(nil)
	if how == "peer-fin" || how == "writable-shut" {
		wantErr = io.EOF
	}
	if closeErr != wantErr {
		t.Errorf("run %d: OnClose(%v), want %v", run, closeErr, wantErr)
		ok = false
	}
	return ok
}
