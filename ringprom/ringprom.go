// Package ringprom exports ringloop's metrics to Prometheus through
// client_golang: NewCollector's collector reads a fresh metrics.Snapshot at
// each scrape and turns its Families into client_golang's constant
// metrics, with the names and labels docs/operations.md lists
// (ringloop_loop_turns_total{group="…",loop="…"}, …).
//
// It is a module of its own, so that ringloop's module graph stays
// golang.org/x/sys: only programs that import ringprom depend on
// client_golang.
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(ringprom.NewCollector())
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
package ringprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringloop/ringloop/metrics"
)

// Collector is a prometheus.Collector of every live ringloop group, its
// loops, servers and datagram sockets. It is unchecked: the groups and
// servers come and go, so its metrics are not described in advance.
type Collector struct{}

// NewCollector returns a collector for prometheus.Register.
func NewCollector() *Collector { return &Collector{} }

// Describe sends nothing: the collector is unchecked (see Collector).
func (*Collector) Describe(chan<- *prometheus.Desc) {}

// Collect reads a snapshot (metrics.Take) and sends its metrics.
func (*Collector) Collect(ch chan<- prometheus.Metric) {
	for _, f := range metrics.Take().Families() {
		collect(ch, f)
	}
}

func collect(ch chan<- prometheus.Metric, f metrics.Family) {
	var desc *prometheus.Desc
	var names []string
	for _, s := range f.Samples {
		if desc == nil {
			names = make([]string, len(s.Labels))
			for i, l := range s.Labels {
				names[i] = l.Name
			}
			desc = prometheus.NewDesc(f.Name, f.Help, names, nil)
		}
		values := make([]string, len(s.Labels))
		for i, l := range s.Labels {
			values[i] = l.Value
		}
		var m prometheus.Metric
		var err error
		switch {
		case f.Type == metrics.Histogram && s.Hist != nil:
			buckets := make(map[float64]uint64, len(s.Hist.Buckets))
			for _, b := range s.Hist.Buckets {
				buckets[b.UpperBound] = b.Count
			}
			m, err = prometheus.NewConstHistogram(desc, s.Hist.Count, s.Hist.Sum, buckets, values...)
		case f.Type == metrics.Counter:
			m, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, s.Value, values...)
		default:
			m, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, s.Value, values...)
		}
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, err)
		}
		ch <- m
	}
}
