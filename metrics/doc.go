// Package metrics publishes what ringloop counts, the way Go services
// publish: a Snapshot of every live group (its loops' loop.Stats, its
// servers' conn.ServerStats and its datagram sockets' conn.PacketStats),
// the expvar variable "ringloop" (Publish), and Prometheus's text format
// (Handler, WritePrometheus), with no dependency beyond the standard
// library.
//
// Nothing is registered at import. A program serving /debug/vars calls
// Publish once; one serving /metrics mounts Handler, or, with
// client_golang, registers the collector of the module
// github.com/ringloop/ringloop/ringprom, which turns the same Families
// into client_golang metrics.
//
// Reading costs the loops nothing: every counter is an atomic the loop
// updates as it goes, and Take reads them from the caller's goroutine.
// docs/operations.md lists every metric, what healthy looks like and what
// to alert on.
package metrics
