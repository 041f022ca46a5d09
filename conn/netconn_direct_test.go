package conn_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// ndPair returns a NetConn dialed with DialNet on a one-loop group of b
// and the package-net connection it reached.
func ndPair(t *testing.T, b loop.Backend, opts ...conn.Option) (*conn.NetConn, net.Conn) {
	t.Helper()
	g := ctGroup(t, b, 1)
	ln := testutil.Loopback(t)
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Errorf("Accept: %v", err)
		}
		acc <- c
	}()
	nc, err := conn.DialNet(context.Background(), g, "tcp", ln.Addr().String(), opts...)
	if err != nil {
		t.Fatalf("DialNet: %v", err)
	}
	peer := <-acc
	if peer == nil {
		t.FailNow()
	}
	t.Cleanup(func() { nc.Close(); peer.Close() })
	return nc, peer
}

// TestNetConnWriteIdleSendsWithoutLoop: a reply, a Write to a connection
// with nothing queued after its loop delivered a request and went back to
// waiting, goes out from the writing goroutine: the peer gets the bytes
// and the loop was never woken for them. A second Write before the next
// request, and a Write while the loop runs a task, are queued for the loop
// instead.
func TestNetConnWriteIdleSendsWithoutLoop(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		nc, peer := ndPair(t, b)
		l := nc.Conn().Loop()
		peer.SetReadDeadline(time.Now().Add(20 * time.Second))
		buf := make([]byte, 6)
		for i := range 20 {
			if _, err := peer.Write([]byte("?")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(nc, buf[:1]); err != nil {
				t.Fatalf("Read: %v", err)
			}
			testutil.WaitFor(t, 10*time.Second, "the loop to wait", l.Idle)
			wakes := l.Stats().WakeWrites
			if _, err := nc.Write([]byte("direct")); err != nil {
				t.Fatalf("Write: %v", err)
			}
			if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "direct" {
				t.Fatalf("write %d: peer read %q, %v, want \"direct\"", i, buf, err)
			}
			if got := l.Stats().WakeWrites; got != wakes {
				t.Fatalf("write %d: the loop was woken %d times for a write to an idle connection", i, got-wakes)
			}
		}

		testutil.WaitFor(t, 10*time.Second, "the loop to wait", l.Idle)
		wakes := l.Stats().WakeWrites
		if _, err := nc.Write([]byte("second")); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "second" {
			t.Fatalf("peer read %q, %v, want \"second\"", buf, err)
		}
		if got := l.Stats().WakeWrites; got > wakes+1 {
			t.Errorf("a second Write woke the loop %d times, want at most once (queued)", got-wakes)
		}

		release := make(chan struct{})
		busy := make(chan struct{})
		if err := l.Execute(func() { close(busy); <-release }); err != nil {
			t.Fatal(err)
		}
		<-busy
		if _, err := nc.Write([]byte("queued")); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if n := nc.Conn().Buffered(); n != 6 {
			t.Errorf("a Write while the loop is busy left %d bytes queued, want 6", n)
		}
		close(release)
		if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "queued" {
			t.Fatalf("peer read %q, %v, want \"queued\"", buf, err)
		}
	})
}

// TestNetConnWriteOrderAcrossDirectAndQueued: writers on several
// goroutines write numbered records to a peer that reads slowly at first,
// so Writes go out now from the writing goroutine, now partly, now queued
// behind a send of the loop. The peer receives every record whole, each
// writer's in order, and nothing else.
func TestNetConnWriteOrderAcrossDirectAndQueued(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		testutil.CheckLeaks(t)
		nc, peer := ndPair(t, b)
		if err := nc.Conn().SetWriteBuffer(4 << 10); err != nil {
			t.Fatal(err)
		}
		const (
			writers = 4
			records = 600
		)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range records {
					// A record: writer, index, length, then a body of
					// the writer's byte; lengths vary up to 3 KiB.
					n := 16 + (i*37+w*101)%3000
					rec := bytes.Repeat([]byte{byte('a' + w)}, n)
					binary.BigEndian.PutUint32(rec[0:], uint32(w))
					binary.BigEndian.PutUint32(rec[4:], uint32(i))
					binary.BigEndian.PutUint32(rec[8:], uint32(n))
					if _, err := nc.Write(rec); err != nil {
						t.Errorf("writer %d: Write: %v", w, err)
						return
					}
				}
			}()
		}
		// Let the writers fill the socket buffers before reading.
		testutil.WaitFor(t, 10*time.Second, "bytes queued on the loop", func() bool { return nc.Conn().Buffered() > 0 })
		done := make(chan error, 1)
		go func() {
			next := make([]uint32, writers)
			hdr := make([]byte, 12)
			for got := 0; got < writers*records; got++ {
				if _, err := io.ReadFull(peer, hdr); err != nil {
					done <- fmt.Errorf("record %d: %v", got, err)
					return
				}
				w, i, n := binary.BigEndian.Uint32(hdr), binary.BigEndian.Uint32(hdr[4:]), binary.BigEndian.Uint32(hdr[8:])
				if w >= writers || i != next[w] || n < 16 || n > 4096 {
					done <- fmt.Errorf("record %d: header writer %d index %d length %d, want index %d", got, w, i, n, next[w])
					return
				}
				next[w]++
				body := make([]byte, n-12)
				if _, err := io.ReadFull(peer, body); err != nil {
					done <- fmt.Errorf("record %d: %v", got, err)
					return
				}
				if want := bytes.Repeat([]byte{byte('a' + w)}, len(body)); !bytes.Equal(body, want) {
					done <- fmt.Errorf("record %d of writer %d: body interleaved with another write", i, w)
					return
				}
			}
			nc.Close()
			n, err := peer.Read(make([]byte, 1))
			if n != 0 || err != io.EOF {
				done <- fmt.Errorf("after the last record: %d bytes, %v; want EOF", n, err)
				return
			}
			done <- nil
		}()
		wg.Wait()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
