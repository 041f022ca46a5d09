package conn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// lgRecorder is a slog.Handler that keeps every record.
type lgRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *lgRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *lgRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

func (h *lgRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lgRecorder) WithGroup(string) slog.Handler      { return h }

// find returns the first record with message msg.
func (h *lgRecorder) find(msg string) (slog.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.Message == msg {
			return r, true
		}
	}
	return slog.Record{}, false
}

func (h *lgRecorder) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.recs)
}

// lgAttr returns the record's attribute key, resolved.
func lgAttr(r slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value.Resolve(), true
			return false
		}
		return true
	})
	return v, found
}

// lgCheckStack checks the stack attribute of a panic's record: a group of
// frames "0", "1", …, one line each, from the panic on, through the
// function that panicked (named by inFunc). Rendered by a TextHandler it
// stays one line per frame with no escaped newline; by a JSONHandler it is
// an object of frame strings.
func lgCheckStack(t *testing.T, r slog.Record, inFunc string) {
	t.Helper()
	v, ok := lgAttr(r, "stack")
	if !ok || v.Kind() != slog.KindGroup || len(v.Group()) < 2 {
		t.Fatalf("%q: stack attribute %v (%v), want a group of frames", r.Message, v, v.Kind())
	}
	frames := v.Group()
	if !strings.HasPrefix(frames[0].Value.String(), "panic(") {
		t.Errorf("first frame %q, want the panic's", frames[0].Value.String())
	}
	seen := false
	for i, f := range frames {
		if f.Key != strconv.Itoa(i) {
			t.Errorf("frame %d keyed %q", i, f.Key)
		}
		s := f.Value.String()
		if strings.ContainsAny(s, "\n\t") || !strings.Contains(s, ".go:") && !strings.HasPrefix(s, "...") {
			t.Errorf("frame %d: %q, want one line naming its file", i, s)
		}
		seen = seen || strings.Contains(s, inFunc)
	}
	if !seen {
		t.Errorf("no frame names %s:\n%v", inFunc, frames)
	}

	var text bytes.Buffer
	if err := slog.NewTextHandler(&text, nil).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	if strings.Count(out, "\n") != 1 || strings.Contains(out, `\n`) || strings.Contains(out, `\t`) || !strings.Contains(out, ` stack.0="panic(`) {
		t.Errorf("TextHandler output: %s", out)
	}
	var js bytes.Buffer
	if err := slog.NewJSONHandler(&js, nil).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	var rec struct{ Stack map[string]string }
	if err := json.Unmarshal(js.Bytes(), &rec); err != nil || len(rec.Stack) != len(frames) || !strings.HasPrefix(rec.Stack["0"], "panic(") {
		t.Errorf("JSONHandler output (%v): %s", err, js.String())
	}
}

// TestLogsGoToGroupLogger: conn logs what it logs (a handler's panic, a
// datagram handler's panic, a ListenFunc factory returning nil) through
// the logger of the group (loop.WithLogger), not slog.Default(); a panic's
// stack is one attribute per frame (lgCheckStack).
func TestLogsGoToGroupLogger(t *testing.T) {
	ctQuietLogs(t)
	def := &lgRecorder{}
	slog.SetDefault(slog.New(def)) // ctQuietLogs restores it
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		rec := &lgRecorder{}
		g := ctGroup(t, b, 1, loop.WithLogger(slog.New(rec)))
		defCount := def.count()

		// A stream handler's panic.
		h := ctNewServerHandler(t, func(e *ctEvents) {
			e.onData = func(*conn.Conn, []byte) { panic("boom in OnData") }
		})
		s := ctListen(t, "tcp", "127.0.0.1:0", g, h)
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("x"))
		const streamMsg = "conn: handler panicked; closing the connection"
		ctWaitFor(t, 5*time.Second, "the panic's record", func() bool { _, ok := rec.find(streamMsg); return ok })
		r, _ := rec.find(streamMsg)
		if v, _ := lgAttr(r, "callback"); v.String() != "OnData" {
			t.Errorf("callback %v", v)
		}
		if v, _ := lgAttr(r, "loop"); v.String() != g.Loop(0).String() {
			t.Errorf("loop %v, want %v", v, g.Loop(0))
		}
		lgCheckStack(t, r, "conn_test.TestLogsGoToGroupLogger")

		// A datagram handler's panic.
		pc, err := conn.ListenPacket(context.Background(), g, "udp", "127.0.0.1:0",
			conn.PacketHandlerFunc(func(*conn.PacketConn, []byte, conn.Addr) { panic("boom in OnPacket") }))
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		u, err := net.Dial("udp", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		u.Write([]byte("x"))
		const packetMsg = "conn: datagram handler panicked; the socket goes on"
		ctWaitFor(t, 5*time.Second, "the datagram panic's record", func() bool { _, ok := rec.find(packetMsg); return ok })
		r, _ = rec.find(packetMsg)
		lgCheckStack(t, r, "conn_test.TestLogsGoToGroupLogger")

		// A factory that returns nil.
		fs, err := conn.ListenFunc(context.Background(), g, "tcp", "127.0.0.1:0", func(*conn.Conn) conn.Handler { return nil })
		if err != nil {
			t.Fatal(err)
		}
		defer fs.Close()
		if fc, err := net.Dial("tcp", fs.Addr().String()); err == nil { // else the reset came first
			defer fc.Close()
		}
		ctWaitFor(t, 5*time.Second, "the factory's record", func() bool { _, ok := rec.find("conn: closing the connection"); return ok })

		if n := def.count(); n != defCount {
			t.Errorf("slog.Default() got %d records, want none", n-defCount)
		}
	})
}
