package ringprom_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ringprom"
)

type echo struct{ conn.NopHandler }

func (echo) OnData(c *conn.Conn, data []byte) { c.Write(data) }

// TestScrape serves an echo on each backend, moves known traffic, scrapes
// a registry holding the collector over HTTP, parses the exposition with
// Prometheus's own parser, and checks the server's and the loops' metrics.
func TestScrape(t *testing.T) {
	for _, b := range []loop.Backend{loop.BackendUring, loop.BackendEpoll} {
		t.Run(b.String(), func(t *testing.T) {
			g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(1))
			if err != nil {
				t.Skipf("backend %v: %v", b, err)
			}
			defer g.Shutdown(context.Background())
			srv, err := conn.Listen(context.Background(), g, "tcp", "127.0.0.1:0", echo{})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			for range 2 {
				c, err := net.Dial("tcp", srv.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				c.Write([]byte("ping"))
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
					t.Fatal(err)
				}
				c.Close()
			}
			for deadline := time.Now().Add(5 * time.Second); srv.Stats().Closed < 2; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("connections not closed")
				}
			}

			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(ringprom.NewCollector())
			ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
			defer ts.Close()
			resp, err := http.Get(ts.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("scrape: %s: %s", resp.Status, body)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(resp.Body)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			find := func(name string, labels map[string]string) *dto.Metric {
				t.Helper()
				f := fams[name]
				if f == nil {
					t.Fatalf("family %s missing", name)
				}
				for _, m := range f.GetMetric() {
					ok := true
					for k, v := range labels {
						found := false
						for _, lp := range m.GetLabel() {
							found = found || lp.GetName() == k && lp.GetValue() == v
						}
						ok = ok && found
					}
					if ok {
						return m
					}
				}
				t.Fatalf("%s%v missing", name, labels)
				return nil
			}
			sl := map[string]string{"group": g.String(), "network": "tcp", "addr": srv.Addr().String()}
			if v := find("ringloop_server_accepted_total", sl).GetCounter().GetValue(); v != 2 {
				t.Errorf("accepted %v, want 2", v)
			}
			if v := find("ringloop_server_closed_total", sl).GetCounter().GetValue(); v != 2 {
				t.Errorf("closed %v, want 2", v)
			}
			ll := map[string]string{"group": g.String(), "loop": g.Loop(0).String()}
			if v := find("ringloop_loop_turns_total", ll).GetCounter().GetValue(); v <= 0 {
				t.Errorf("turns %v", v)
			}
			for name, f := range fams {
				if !strings.HasPrefix(name, "ringloop_") {
					continue
				}
				if f.GetType() == dto.MetricType_HISTOGRAM {
					h := find(name, ll).GetHistogram()
					if len(h.GetBucket()) == 0 {
						t.Errorf("%s has no bucket", name)
					}
				}
			}
		})
	}
}
