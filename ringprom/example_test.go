package ringprom_test

import (
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ringloop/ringloop/ringprom"
)

// A program registers the collector once; every scrape of /metrics then
// reads the live groups, their loops, servers and datagram sockets.
func ExampleNewCollector() {
	reg := prometheus.NewRegistry()
	reg.MustRegister(ringprom.NewCollector())
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	go func() { log.Println(http.ListenAndServe("127.0.0.1:9090", nil)) }()
}
