// Package ringloop is a cgo-free, completion-based network runtime for Go on
// Linux io_uring, built on Netty's EventLoop thread model.
//
// The module is four small packages in a strict order:
//
//	ring   our own io_uring binding on golang.org/x/sys/unix (unsafe only there and in internal/sock)
//	sched  pure Go scheduling core: MPSC task queue, hashed timer wheel, futures
//	loop   Group of Loops: one goroutine locked to one OS thread, one ring each
//	conn   TCP and Unix stream servers and clients on the loops
//
// See README.md and docs/ for the design and the status of each part.
package ringloop
