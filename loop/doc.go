// Package loop provides Netty-style event loops on io_uring (and epoll):
// a Group of Loops, each one goroutine locked to one OS thread that owns one
// ring, runs tasks, timers and I/O completions.
package loop
