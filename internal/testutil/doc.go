// Package testutil holds the helpers shared by ringloop's tests: skipping
// where the kernel refuses io_uring, loopback sockets, fd / mapping /
// goroutine leak checks and a watchdog. It is imported by _test.go files
// only, and like everything outside packages ring and internal/sock it
// does not import unsafe.
package testutil
