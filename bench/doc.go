// Package bench is the root of the comparison module: the echo servers
// (cmd/ringecho, cmd/netecho, cmd/gnetecho, c/uring_echo.c), the load
// generator (cmd/loadgen), the servers and load generators of the HTTP and
// QUIC workloads (cmd/httpserve, cmd/httpload, cmd/quicserve,
// cmd/quicload) and the harness that runs them side by side
// (cmd/harness). See README.md. Its own go.mod keeps the peers (gnet,
// fasthttp, quic-go) out of the library's module graph.
//
// echo_test.go holds BenchmarkEcho, the in-process form for benchstat:
//
//	go test -run '^$' -bench 'Echo' -count 10 . | tee new.txt
package bench
