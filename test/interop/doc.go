// Package interop holds end-to-end tests of ringloop's net adapters under
// real protocol libraries: grpc-go serving on a conn.NetListener until the
// server under it stops, and quic-go running over a conn.NetPacketConn (bulk
// transfers to many clients, many concurrent request/response streams, and
// the GSO and ECN fast path that quic-go turns on for a *net.UDPConn). The
// package has no code of its own, only tests.
//
// It is a module of its own (its go.mod replaces github.com/ringloop/ringloop
// with the checkout around it) so that these libraries and their dependency
// graphs stay out of the library's go.mod: a program that imports ringloop
// never sees them.
package interop
