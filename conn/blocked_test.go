package conn_test

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// recordAttrs returns the records of h with message msg, each as its
// attributes by key.
func recordAttrs(h *lgRecorder, msg string) []map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]slog.Value
	for _, r := range h.recs {
		if r.Message == msg {
			m := map[string]slog.Value{}
			r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Resolve(); return true })
			out = append(out, m)
		}
	}
	return out
}

// sleepyHandler's OnData blocks its loop for half a second, as a handler
// making a synchronous call would.
type sleepyHandler struct{ conn.NopHandler }

func (sleepyHandler) OnData(c *conn.Conn, data []byte) {
	time.Sleep(500 * time.Millisecond)
	c.Write(data)
}

// A handler that blocks its loop for 500 ms is reported by the group's
// blocked-loop detector (default threshold, 200 ms) once, naming the
// handler method and with the loop goroutine's stack through the handler,
// then reported unblocked, and counted once in the loop's Stats.
func TestBlockedHandlerReported(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		log := &lgRecorder{}
		g := ctGroup(t, b, 1, loop.WithLogger(slog.New(log)))
		srv := ctListen(t, "tcp", "127.0.0.1:0", g, sleepyHandler{})
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("x"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		ctWaitFor(t, 2*time.Second, "the unblocked record", func() bool { return len(recordAttrs(log, "loop: unblocked")) > 0 })
		blocked := recordAttrs(log, "loop: blocked")
		if len(blocked) != 1 {
			t.Fatalf("%d blocked records, want 1", len(blocked))
		}
		r := blocked[0]
		if r["loop"].String() != g.Loop(0).String() || r["running"].String() != "conn Handler.OnData" {
			t.Errorf("blocked record: loop %v, running %q; want %v, %q", r["loop"], r["running"], g.Loop(0), "conn Handler.OnData")
		}
		if d := r["blocked"].Duration(); d < loop.DefaultBlockedThreshold || d > 600*time.Millisecond {
			t.Errorf("blocked %v so far, want between the threshold and the block", d)
		}
		if stack := r["stack"].String(); !strings.Contains(stack, "conn_test.sleepyHandler.OnData") || !strings.Contains(stack, "time.Sleep") {
			t.Errorf("the stack does not show the blocking handler:\n%s", stack)
		}
		if n := g.Loop(0).Stats().BlockedEpisodes; n != 1 {
			t.Errorf("BlockedEpisodes = %d, want 1", n)
		}
	})
}
