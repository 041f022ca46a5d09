package metrics_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/metrics"
	"github.com/ringloop/ringloop/ring"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

var quietLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func forEachBackend(t *testing.T, f func(t *testing.T, b loop.Backend)) {
	for _, b := range []loop.Backend{loop.BackendUring, loop.BackendEpoll} {
		t.Run("backend="+b.String(), func(t *testing.T) {
			if b == loop.BackendUring {
				testutil.SkipIfNoUring(t)
			}
			f(t, b)
		})
	}
}

func newGroup(t *testing.T, b loop.Backend) *loop.Group {
	t.Helper()
	g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(2), loop.WithLogger(quietLogger))
	if err != nil {
		if b == loop.BackendUring && errors.Is(err, ring.ErrNotSupported) {
			t.Skipf("io_uring unavailable: %v", err)
		}
		t.Fatalf("NewGroup: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return g
}

// echo writes back what it receives and keeps each connection's counters
// as they stood when it closed.
type echo struct {
	mu     sync.Mutex
	closed []conn.ConnStats
}

func (*echo) OnOpen(*conn.Conn)                {}
func (*echo) OnData(c *conn.Conn, data []byte) { c.Write(data) }
func (e *echo) OnClose(c *conn.Conn, err error) {
	e.mu.Lock()
	e.closed = append(e.closed, c.Stats())
	e.mu.Unlock()
}

type dgramEcho struct{}

func (dgramEcho) OnPacket(pc *conn.PacketConn, data []byte, from conn.Addr) {
	pc.WriteToAddr(data, from)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// traffic runs conns echo clients of the given sizes against srv, and
// datagrams against pc; it returns the bytes each client sent.
func traffic(t *testing.T, srv *conn.Server, pc *conn.PacketConn, sizes []int, dgrams []int) {
	t.Helper()
	for _, n := range sizes {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte{'x'}, n)
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	u, err := net.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	buf := make([]byte, 2048)
	for _, n := range dgrams {
		if _, err := u.Write(bytes.Repeat([]byte{'d'}, n)); err != nil {
			t.Fatal(err)
		}
		u.SetReadDeadline(time.Now().Add(10 * time.Second))
		if got, err := u.Read(buf); err != nil || got != n {
			t.Fatalf("datagram echo: %d bytes, %v; want %d", got, err, n)
		}
	}
}

func sum(xs []int) (s uint64) {
	for _, x := range xs {
		s += uint64(x)
	}
	return s
}

// TestCountersMatchTraffic checks every counter of a server, its
// connections and a datagram socket against the traffic of an echo test,
// exactly, and finds them in the snapshot, the expvar variable and the
// Prometheus text.
func TestCountersMatchTraffic(t *testing.T) {
	metrics.Publish()
	metrics.Publish() // a second call registers nothing (expvar would panic)
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g := newGroup(t, b)
		h := &echo{}
		srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", h)
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		pc, err := conn.ListenPacket(context.Background(), g, "udp", "127.0.0.1:0", dgramEcho{})
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		sizes := []int{1, 1000, 70000}
		dgrams := []int{0, 1, 512, 1400}
		traffic(t, srv, pc, sizes, dgrams)
		waitFor(t, "every connection closed", func() bool { return srv.Stats().Closed == uint64(len(sizes)) })
		// The client has every echo; the loop counts a send as it
		// handles its completion, which may come a moment later.
		waitFor(t, "every echo counted", func() bool { return pc.Stats().Sent >= uint64(len(dgrams)) })

		st := srv.Stats()
		want := conn.ServerStats{Accepted: 3, Active: 0, Closed: 3, BacklogMax: st.BacklogMax}
		if st != want {
			t.Errorf("server stats %+v, want %+v", st, want)
		}
		if st.BacklogMax <= 0 {
			t.Errorf("BacklogMax %d, want the listen backlog", st.BacklogMax)
		}
		h.mu.Lock()
		closed := append([]conn.ConnStats(nil), h.closed...)
		h.mu.Unlock()
		var in, out uint64
		for _, cs := range closed {
			if cs.BytesIn != cs.BytesOut || cs.Reads == 0 || cs.Writes == 0 || cs.Reads > cs.BytesIn || cs.Writes > cs.BytesOut {
				t.Errorf("connection stats %+v: want as many bytes out as in, and at least one read and write", cs)
			}
			in += cs.BytesIn
			out += cs.BytesOut
		}
		if in != sum(sizes) || out != sum(sizes) {
			t.Errorf("connections moved %d in, %d out; want %d each", in, out, sum(sizes))
		}
		ps := pc.Stats()
		if ps.Received != uint64(len(dgrams)) || ps.Sent != uint64(len(dgrams)) ||
			ps.BytesReceived != sum(dgrams) || ps.BytesSent != sum(dgrams) ||
			ps.Truncated+ps.Dropped+ps.KernelDrops+ps.ReadErrors+ps.WriteErrors+ps.QueueFull != 0 {
			t.Errorf("datagram stats %+v, want %d datagrams and %d bytes each way, nothing lost", ps, len(dgrams), sum(dgrams))
		}

		// The snapshot, the expvar JSON and the Prometheus text carry them.
		snap := metrics.Take()
		check := func(from string, s metrics.Snapshot) {
			t.Helper()
			sg := findGroup(s, g.String())
			if sg == nil {
				t.Fatalf("%s: group %s missing", from, g)
			}
			if sg.Backend != b.String() || len(sg.Loops) != 2 || sg.Loops[0].Name != g.Loop(0).String() {
				t.Errorf("%s: group %+v", from, sg)
			}
			if len(sg.Servers) != 1 || sg.Servers[0].Addr != srv.Addr().String() || sg.Servers[0].ServerStats != st {
				t.Errorf("%s: servers %+v, want %s with %+v", from, sg.Servers, srv.Addr(), st)
			}
			if len(sg.PacketConns) != 1 || sg.PacketConns[0].Addr != pc.LocalAddr().String() ||
				sg.PacketConns[0].Received != ps.Received || sg.PacketConns[0].BytesSent != ps.BytesSent {
				t.Errorf("%s: datagram sockets %+v, want %s with %+v", from, sg.PacketConns, pc.LocalAddr(), ps)
			}
			var completions uint64
			for _, l := range sg.Loops {
				completions += l.Completions
			}
			if completions == 0 {
				t.Errorf("%s: no completion counted", from)
			}
		}
		check("Take", snap)
		var fromVar metrics.Snapshot
		if err := json.Unmarshal([]byte(expvar.Get(metrics.ExpvarName).String()), &fromVar); err != nil {
			t.Fatalf("expvar %q: %v", metrics.ExpvarName, err)
		}
		check("expvar", fromVar)

		rec := httptest.NewRecorder()
		metrics.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Errorf("Content-Type %q", ct)
		}
		samples := parseText(t, rec.Body.String())
		srvLabels := fmt.Sprintf(`{group="%s",network="tcp",addr="%s"}`, g, srv.Addr())
		pcLabels := fmt.Sprintf(`{group="%s",loop="%s",network="udp",addr="%s"}`, g, pc.Loop(), pc.LocalAddr())
		for name, want := range map[string]float64{
			"ringloop_server_accepted_total" + srvLabels:     3,
			"ringloop_server_closed_total" + srvLabels:       3,
			"ringloop_server_active_connections" + srvLabels: 0,
			"ringloop_packet_received_total" + pcLabels:      float64(len(dgrams)),
			"ringloop_packet_sent_bytes_total" + pcLabels:    float64(sum(dgrams)),
		} {
			if got, ok := samples[name]; !ok || got != want {
				t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
			}
		}
		ll := fmt.Sprintf(`{group="%s",loop="%s"}`, g, g.Loop(0))
		if got := samples["ringloop_loop_turns_total"+ll]; got == 0 {
			t.Errorf("no turns for loop %s in the text", g.Loop(0))
		}
		if _, ok := samples["ringloop_loop_blocked_episodes_total"+ll]; !ok {
			t.Errorf("no blocked-episode count for loop %s in the text", g.Loop(0))
		}
		// Each histogram's +Inf bucket is its count, and no bucket holds
		// more than the next.
		for _, h := range []string{"turn_seconds", "io_phase_seconds", "task_phase_seconds", "queue_delay_seconds"} {
			name := "ringloop_loop_" + h
			count, ok := samples[name+"_count"+ll]
			inf := samples[name+`_bucket{group="`+g.String()+`",loop="`+g.Loop(0).String()+`",le="+Inf"}`]
			if !ok || count != inf || (h == "turn_seconds" && count == 0) {
				t.Errorf("%s: count %v (present %v), +Inf bucket %v", name, count, ok, inf)
			}
			prev := 0.0
			bounds := loop.HistogramBounds()
			for _, le := range bounds[:loop.HistogramBuckets-1] {
				v := samples[fmt.Sprintf(`%s_bucket{group="%s",loop="%s",le="%s"}`, name, g, g.Loop(0), strconv.FormatFloat(le.Seconds(), 'g', -1, 64))]
				if v < prev {
					t.Errorf("%s: bucket le=%v holds %v, less than the one below (%v)", name, le, v, prev)
				}
				prev = v
			}
			if prev > inf {
				t.Errorf("%s: the last bounded bucket holds %v, more than +Inf (%v)", name, prev, inf)
			}
		}
	})
}

func findGroup(s metrics.Snapshot, name string) *metrics.Group {
	for i := range s.Groups {
		if s.Groups[i].Name == name {
			return &s.Groups[i]
		}
	}
	return nil
}

// sampleLine is a sample line of the text format: a name, labels, a value.
var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$`)

// parseText checks every line of a text exposition (HELP and TYPE before
// each family's samples, samples well formed) and returns the samples by
// name and labels.
func parseText(t *testing.T, text string) map[string]float64 {
	t.Helper()
	samples := map[string]float64{}
	typed := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			if typ != "counter" && typ != "gauge" && typ != "histogram" {
				t.Errorf("bad type line %q", line)
			}
			if _, dup := typed[name]; dup {
				t.Errorf("family %s typed twice", name)
			}
			typed[name] = typ
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("malformed sample line %q", line)
			continue
		}
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m[1], "_bucket"), "_sum"), "_count")
		if typed[m[1]] == "" && typed[base] != "histogram" {
			t.Errorf("sample %q before its TYPE line", line)
		}
		var v float64
		if _, err := fmt.Sscan(m[3], &v); err != nil && m[3] != "+Inf" {
			t.Errorf("value of %q: %v", line, err)
		}
		samples[m[1]+m[2]] = v
	}
	return samples
}

// TestClosedLeaveTheSnapshot checks that a closed server and datagram
// socket, and a terminated group, are no longer listed.
func TestClosedLeaveTheSnapshot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b loop.Backend) {
		g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLogger(quietLogger))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", &echo{})
		if err != nil {
			t.Fatal(err)
		}
		pc, err := conn.ListenPacket(context.Background(), g, "udp", "127.0.0.1:0", dgramEcho{})
		if err != nil {
			t.Fatal(err)
		}
		if sg := findGroup(metrics.Take(), g.String()); sg == nil || len(sg.Servers) != 1 || len(sg.PacketConns) != 1 {
			t.Fatalf("open: %+v", sg)
		}
		srv.Close()
		pc.Close()
		<-pc.Done()
		if sg := findGroup(metrics.Take(), g.String()); sg == nil || len(sg.Servers)+len(sg.PacketConns) != 0 {
			t.Fatalf("closed: %+v", sg)
		}
		if err := g.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if sg := findGroup(metrics.Take(), g.String()); sg != nil {
			t.Fatalf("terminated group still listed: %+v", sg)
		}
	})
}
