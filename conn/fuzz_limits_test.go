package conn_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testknobs"
	"github.com/ringloop/ringloop/loop"
)

// FuzzLimits feeds arbitrary durations and sizes to every option and
// scheduling call that takes one. Each must be refused with a clear error
// or saturate; none may panic; a server built from accepted options echoes
// 64 KiB intact; and the loops do not spin afterwards (their turns over an
// idle 50 ms stay those of an idle loop). CI runs it for a bounded time
// (.ci/extra); go test runs the seeds.
func FuzzLimits(f *testing.F) {
	for _, s := range [][6]int64{
		{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{math.MinInt64, -1, 0, 1, 1 << 32, -1 << 40},
		{int64(time.Millisecond), int64(time.Hour), 0, 16 << 10, 64 << 10, 256},
		{1, 1, 1, 1, 1, 1},
		{int64(10 * time.Hour), 1 << 31, 1 << 20, 32768, 1 << 20, 255},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5])
	}
	f.Fuzz(func(t *testing.T, d1, d2, d3, n1, n2, n3 int64) {
		dur := func(v int64) time.Duration { return time.Duration(v) }
		g, err := loop.NewGroup(loop.WithLoops(1), loop.WithLogger(ctLogger),
			testknobs.Tick(dur(d1)%(2*time.Second)).(loop.Option), testknobs.DrainTimeout(dur(d2)).(loop.Option),
			loop.WithMaxPendingTasks(int(n1)), loop.WithStallThreshold(int(n2)),
			loop.WithBufferRing(uint32(n1), uint32(n2)), loop.WithDatagramBuffers(uint32(n3), uint32(n1)),
			testknobs.MaxOps(uint32(n3)).(loop.Option),
			loop.WithRingEntries(uint32(n3)), loop.WithIORatio(int(n3%200)))
		if err != nil {
			// Refused options: the rest runs on a default group.
			if g, err = loop.NewGroup(loop.WithLoops(1), loop.WithLogger(ctLogger)); err != nil {
				t.Fatal(err)
			}
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g.Shutdown(ctx); err != nil {
				t.Fatalf("Group.Shutdown: %v", err)
			}
		}()
		l := g.Loop(0)
		var timers []interface{ Stop() bool }
		for _, d := range []int64{d1, d2, d3} {
			if tm, err := l.Schedule(dur(d), func() {}); err == nil {
				timers = append(timers, tm)
			}
			if tm, err := l.ScheduleAtFixedRate(dur(d), dur(d2), func() {}); err == nil {
				timers = append(timers, tm)
			}
			if tm, err := l.ScheduleWithFixedDelay(dur(d3), dur(d), func() {}); err == nil {
				timers = append(timers, tm)
			}
		}

		opts := []conn.Option{
			conn.WithReadTimeout(dur(d1)), conn.WithIdleTimeout(dur(d2)), conn.WithLinger(dur(d3)),
			conn.WithKeepAlive(dur(d1)), conn.WithBacklog(int(n1)), conn.WithReadBuffer(int(n2)),
			conn.WithWriteBuffer(int(n3)), conn.WithWaterMarks(int(n1), int(n2)),
			conn.WithInboundLimit(int(n3)),
		}
		echo := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", echo, opts...)
		if err != nil {
			// Refused: try each option alone, so every accepted value
			// still serves.
			srv = nil
			for _, o := range opts {
				if s, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", echo, o); err == nil {
					fuzzEcho(t, s)
					s.Close()
				}
			}
		} else {
			fuzzEcho(t, srv)
			srv.Close()
		}
		_, _ = conn.Dial(context.Background(), g, "tcp", "127.0.0.1:1", ctNewEvents(t), conn.WithConnectTimeout(dur(d1)))

		// No spin: with its timers stopped (a tiny period is work the
		// caller asked for), an idle loop turns at most once per wait.
		for _, tm := range timers {
			tm.Stop()
		}
		runOnLoop(t, l)
		turns := l.Stats().Turns
		time.Sleep(50 * time.Millisecond)
		if d := l.Stats().Turns - turns; d > 60 {
			t.Fatalf("the loop turned %d times in an idle 50ms", d)
		}
	})
}

// fuzzEcho sends 64 KiB through srv and checks what comes back within a
// second is a prefix of it. A server whose options close connections early
// (a tiny timeout) or crawl (one-byte provided buffers, a one-task queue)
// may return less; it may never return other bytes.
func fuzzEcho(t *testing.T, srv *conn.Server) {
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	msg := make([]byte, 64<<10)
	ctPattern(msg, 0)
	go c.Write(msg)
	got := make([]byte, len(msg))
	n, _ := io.ReadFull(c, got)
	if !bytes.Equal(got[:n], msg[:n]) {
		t.Fatal("echoed bytes differ from those sent")
	}
}

// runOnLoop waits for a task on l, then for another queued after it ran
// (the stopped timers leave the wheel on the loop's next turns).
func runOnLoop(t *testing.T, l *loop.Loop) {
	for range 2 {
		done := make(chan struct{})
		for {
			err := l.Execute(func() { close(done) })
			if err == nil {
				break
			}
			if !errors.Is(err, loop.ErrQueueFull) {
				t.Fatal(err)
			}
			// A bound of 1 task: wait for room.
			ctWaitFor(t, 10*time.Second, "room in the task queue", func() bool { return l.Stats().PendingTasks == 0 })
		}
		<-done
	}
}
