package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/ringloop/ringloop/loop"
)

// A Family is one metric of the Prometheus data model: a name, its help, its
// type and its samples, one per set of label values. Families is the one
// place the names are made; WritePrometheus renders them in Prometheus's
// text format, and an exporter with a client library of its own (the
// ringprom module for client_golang) converts them.
type Family struct {
	Name    string // ringloop_<subject>_<what>[_<unit>][_total]
	Help    string
	Type    Type
	Samples []Sample
}

// Type is a Family's metric type.
type Type string

// The metric types Families uses.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// A Sample is one value of a Family: a counter's or a gauge's Value, or a
// histogram's buckets, under its label values.
type Sample struct {
	Labels []Label
	Value  float64
	Hist   *HistogramValue // Type Histogram only
}

// A Label is one label's name and value.
type Label struct{ Name, Value string }

// HistogramValue is a histogram sample as Prometheus wants it: cumulative
// bucket counts by upper bound (seconds), the count and the sum.
type HistogramValue struct {
	Count   uint64
	Sum     float64 // seconds
	Buckets []Bucket
}

// A Bucket is the number of observations at most UpperBound.
type Bucket struct {
	UpperBound float64 // seconds
	Count      uint64  // cumulative
}

// loopMetric is one loop.Stats field as a metric.
type loopMetric struct {
	name, help string
	typ        Type
	value      func(*loop.Stats) float64
}

func u(v uint64) float64 { return float64(v) }

var loopMetrics = []loopMetric{
	{"turns_total", "Run-cycle turns.", Counter, func(s *loop.Stats) float64 { return u(s.Turns) }},
	{"tasks_total", "Tasks run, due timers and tail tasks included.", Counter, func(s *loop.Stats) float64 { return u(s.Tasks) }},
	{"pending_tasks", "Tasks queued and not yet run.", Gauge, func(s *loop.Stats) float64 { return float64(s.PendingTasks) }},
	{"panics_total", "Tasks, timers, completers and hooks that panicked (recovered).", Counter, func(s *loop.Stats) float64 { return u(s.Panics) }},
	{"rejected_total", "Tasks and timers refused (queue full, or shutting down).", Counter, func(s *loop.Stats) float64 { return u(s.Rejected) }},
	{"sleeps_total", "Blocking waits.", Counter, func(s *loop.Stats) float64 { return u(s.Sleeps) }},
	{"wake_writes_total", "Eventfd writes by other goroutines to end a wait.", Counter, func(s *loop.Stats) float64 { return u(s.WakeWrites) }},
	{"wakeups_total", "Waits ended by a wakeup.", Counter, func(s *loop.Stats) float64 { return u(s.Wakeups) }},
	{"ops_submitted_total", "I/O operations handed to the backend.", Counter, func(s *loop.Stats) float64 { return u(s.OpsSubmitted) }},
	{"completions_total", "Completions delivered.", Counter, func(s *loop.Stats) float64 { return u(s.Completions) }},
	{"stale_completions_total", "Completions naming no live operation (dropped).", Counter, func(s *loop.Stats) float64 { return u(s.StaleCompletions) }},
	{"ops_in_flight", "I/O operations not yet at their final completion.", Gauge, func(s *loop.Stats) float64 { return float64(s.OpsInFlight) }},
	{"parked_recvs_total", "Provided-buffer receives parked for want of buffers.", Counter, func(s *loop.Stats) float64 { return u(s.ParkedRecvs) }},
	{"early_returns_total", "Waits that returned early with nothing to do (stalled-ring detector input).", Counter, func(s *loop.Stats) float64 { return u(s.EarlyReturns) }},
	{"interrupts_total", "Waits interrupted by a signal.", Counter, func(s *loop.Stats) float64 { return u(s.Interrupts) }},
	{"poll_errors_total", "Failed waits.", Counter, func(s *loop.Stats) float64 { return u(s.PollErrors) }},
	{"rebuilds_total", "Ring (or epoll instance) replacements.", Counter, func(s *loop.Stats) float64 { return u(s.Rebuilds) }},
	{"rebuild_failures_total", "Replacements that failed.", Counter, func(s *loop.Stats) float64 { return u(s.RebuildFailures) }},
	{"migrated_ops_total", "Operations moved to a new ring by rebuilds.", Counter, func(s *loop.Stats) float64 { return u(s.MigratedOps) }},
	{"io_seconds_total", "Time spent dispatching completions.", Counter, func(s *loop.Stats) float64 { return float64(s.IONanos) / 1e9 }},
	{"task_seconds_total", "Time spent in the task phase.", Counter, func(s *loop.Stats) float64 { return float64(s.TaskNanos) / 1e9 }},
	{"orphaned_total", "Operations still in flight when the drain deadline passed at termination.", Counter, func(s *loop.Stats) float64 { return u(s.Orphaned) }},
	{"quarantined_total", "Operations given up without the kernel's final word; their memory is kept for good.", Counter, func(s *loop.Stats) float64 { return u(s.Quarantined) }},
	{"quarantined_bytes", "Buffer memory kept for quarantined operations.", Gauge, func(s *loop.Stats) float64 { return u(s.QuarantinedBytes) }},
	{"lost_completions_total", "Completions the kernel dropped (CQ overflow without NODROP).", Counter, func(s *loop.Stats) float64 { return u(s.LostCompletions) }},
	{"buffer_misuse_total", "Completions naming a provided buffer the loop already held.", Counter, func(s *loop.Stats) float64 { return u(s.BufferMisuse) }},
	{"cq_overflows_total", "Polls that found completions waiting on the kernel's overflow list.", Counter, func(s *loop.Stats) float64 { return u(s.CQOverflows) }},
	{"recv_bundles_total", "Receive completions that carried several buffers.", Counter, func(s *loop.Stats) float64 { return u(s.RecvBundles) }},
	{"blocked_episodes_total", "Times a callback, task or turn held the loop past the blocked-loop threshold.", Counter, func(s *loop.Stats) float64 { return u(s.BlockedEpisodes) }},
}

// loopHistograms are the loop.Stats histograms as metrics.
var loopHistograms = []struct {
	name, help string
	value      func(*loop.Stats) *loop.Histogram
}{
	{"turn_seconds", "Busy time of each loop turn (its wait excluded).", func(s *loop.Stats) *loop.Histogram { return &s.TurnTime }},
	{"io_phase_seconds", "Completion dispatch of each turn that dispatched.", func(s *loop.Stats) *loop.Histogram { return &s.IOTime }},
	{"task_phase_seconds", "Task phase of each turn that ran tasks.", func(s *loop.Stats) *loop.Histogram { return &s.TaskTime }},
	{"queue_delay_seconds", "How long the oldest task of each batch waited in the task queue.", func(s *loop.Stats) *loop.Histogram { return &s.QueueDelay }},
}

// histogramValue converts h: cumulative buckets up to the last bounded
// one (the unbounded last bucket is +Inf, the count), in seconds. The
// count is the buckets' total, so that +Inf and the buckets agree even for
// a copy taken while the loop observed.
func histogramValue(h *loop.Histogram) *HistogramValue {
	bounds := loop.HistogramBounds()
	v := &HistogramValue{Sum: h.Sum.Seconds(), Buckets: make([]Bucket, 0, len(bounds)-1)}
	for i, c := range h.Counts {
		v.Count += c
		if i < len(bounds)-1 {
			v.Buckets = append(v.Buckets, Bucket{UpperBound: bounds[i].Seconds(), Count: v.Count})
		}
	}
	return v
}

// Families returns the snapshot as Prometheus metrics, every name
// prefixed "ringloop_". Loops are labelled group and loop; servers group,
// network and addr; datagram sockets group, loop, network and addr.
// Families with no sample (no server open, say) are left out.
func (s Snapshot) Families() []Family {
	var fams []Family
	add := func(f Family) {
		if len(f.Samples) > 0 {
			fams = append(fams, f)
		}
	}
	perLoop := func(name, help string, typ Type, sample func(*loop.Stats) Sample) {
		f := Family{Name: "ringloop_loop_" + name, Help: help, Type: typ}
		for _, g := range s.Groups {
			for i := range g.Loops {
				l := &g.Loops[i]
				smp := sample(&l.Stats)
				smp.Labels = []Label{{"group", g.Name}, {"loop", l.Name}}
				f.Samples = append(f.Samples, smp)
			}
		}
		add(f)
	}
	for _, m := range loopMetrics {
		perLoop(m.name, m.help, m.typ, func(st *loop.Stats) Sample { return Sample{Value: m.value(st)} })
	}
	for _, m := range loopHistograms {
		perLoop(m.name, m.help, Histogram, func(st *loop.Stats) Sample { return Sample{Hist: histogramValue(m.value(st))} })
	}
	server := func(name, help string, typ Type, v func(*Server) float64) {
		f := Family{Name: "ringloop_server_" + name, Help: help, Type: typ}
		for _, g := range s.Groups {
			for i := range g.Servers {
				sv := &g.Servers[i]
				f.Samples = append(f.Samples, Sample{Labels: []Label{{"group", g.Name}, {"network", sv.Network}, {"addr", sv.Addr}}, Value: v(sv)})
			}
		}
		add(f)
	}
	server("accepted_total", "Connections accepted.", Counter, func(s *Server) float64 { return u(s.Accepted) })
	server("active_connections", "Connections open now.", Gauge, func(s *Server) float64 { return float64(s.Active) })
	server("closed_total", "Connections that went through OnClose.", Counter, func(s *Server) float64 { return u(s.Closed) })
	server("refused_total", "Accepted connections closed unserved (shutting down).", Counter, func(s *Server) float64 { return u(s.Refused) })
	server("out_of_resources_total", "Accepts that failed for lack of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM); each pauses accepting.", Counter, func(s *Server) float64 { return u(s.OutOfResources) })
	server("overloads_total", "Pauses of accepting because every worker loop kept more than four times its budget of kept bytes.", Counter, func(s *Server) float64 { return u(s.Overloads) })
	server("accept_errors_total", "Other failed accepts.", Counter, func(s *Server) float64 { return u(s.AcceptErrors) })
	server("backlog", "Connections waiting in the kernel's accept queues.", Gauge, func(s *Server) float64 { return float64(s.Backlog) })
	server("backlog_max", "Size of the kernel's accept queues.", Gauge, func(s *Server) float64 { return float64(s.BacklogMax) })
	packet := func(name, help string, typ Type, v func(*PacketConn) float64) {
		f := Family{Name: "ringloop_packet_" + name, Help: help, Type: typ}
		for _, g := range s.Groups {
			for i := range g.PacketConns {
				p := &g.PacketConns[i]
				f.Samples = append(f.Samples, Sample{Labels: []Label{{"group", g.Name}, {"loop", p.Loop}, {"network", p.Network}, {"addr", p.Addr}}, Value: v(p)})
			}
		}
		add(f)
	}
	packet("received_total", "Datagrams received and delivered.", Counter, func(p *PacketConn) float64 { return u(p.Received) })
	packet("received_bytes_total", "Payload bytes received.", Counter, func(p *PacketConn) float64 { return u(p.BytesReceived) })
	packet("sent_total", "Sends the kernel took (a GSO batch counts once).", Counter, func(p *PacketConn) float64 { return u(p.Sent) })
	packet("sent_bytes_total", "Payload bytes sent.", Counter, func(p *PacketConn) float64 { return u(p.BytesSent) })
	packet("truncated_total", "Datagrams too long for the loop's buffers, not delivered.", Counter, func(p *PacketConn) float64 { return u(p.Truncated) })
	packet("dropped_total", "Datagrams a full inbound queue of the net.PacketConn adapter dropped.", Counter, func(p *PacketConn) float64 { return u(p.Dropped) })
	packet("kernel_drops_total", "Datagrams the kernel dropped: the socket's receive buffer was full.", Counter, func(p *PacketConn) float64 { return u(p.KernelDrops) })
	packet("read_errors_total", "Receive errors that did not close the socket.", Counter, func(p *PacketConn) float64 { return u(p.ReadErrors) })
	packet("write_errors_total", "Datagrams the kernel refused, or dropped at close.", Counter, func(p *PacketConn) float64 { return u(p.WriteErrors) })
	packet("queue_full_total", "Writes refused with ErrQueueFull.", Counter, func(p *PacketConn) float64 { return u(p.QueueFull) })
	return fams
}

// WritePrometheus writes fams in Prometheus's text exposition format
// (version 0.0.4).
func WritePrometheus(w io.Writer, fams []Family) error {
	bw := bufio.NewWriter(w)
	for _, f := range fams {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.Name, escapeHelp(f.Help), f.Name, f.Type)
		for _, s := range f.Samples {
			if f.Type != Histogram || s.Hist == nil {
				writeSample(bw, f.Name, s.Labels, "", "", s.Value)
				continue
			}
			h := s.Hist
			for _, b := range h.Buckets {
				writeSample(bw, f.Name+"_bucket", s.Labels, "le", formatFloat(b.UpperBound), float64(b.Count))
			}
			writeSample(bw, f.Name+"_bucket", s.Labels, "le", "+Inf", float64(h.Count))
			writeSample(bw, f.Name+"_sum", s.Labels, "", "", h.Sum)
			writeSample(bw, f.Name+"_count", s.Labels, "", "", float64(h.Count))
		}
	}
	return bw.Flush()
}

func writeSample(w *bufio.Writer, name string, labels []Label, extraName, extraValue string, v float64) {
	w.WriteString(name)
	if len(labels) > 0 || extraName != "" {
		w.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				w.WriteByte(',')
			}
			fmt.Fprintf(w, "%s=\"%s\"", l.Name, escapeLabel(l.Value))
		}
		if extraName != "" {
			if len(labels) > 0 {
				w.WriteByte(',')
			}
			fmt.Fprintf(w, "%s=\"%s\"", extraName, extraValue)
		}
		w.WriteByte('}')
	}
	w.WriteByte(' ')
	w.WriteString(formatFloat(v))
	w.WriteByte('\n')
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// Handler serves the metrics of a fresh snapshot (Take) in Prometheus's
// text format, for a scrape of /metrics without a client library.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = WritePrometheus(w, Take().Families())
	})
}
