package main

import (
	"expvar"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/ringloop/ringloop/metrics"
)

// serveDebug listens on addr (package net: the operator's endpoint stays up
// whatever the loops do) and serves /debug/pprof/, /debug/vars (with the
// "ringloop" variable) and /metrics (Prometheus's text format). It returns
// the listener, which the caller closes on exit, and the base URL.
func serveDebug(addr string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	metrics.Publish()
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/debug/vars", expvar.Handler())
	mux.Handle("/metrics", metrics.Handler())
	go func() { _ = http.Serve(ln, mux) }()
	return ln, "http://" + ln.Addr().String(), nil
}
