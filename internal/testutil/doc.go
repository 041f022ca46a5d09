// Package testutil holds the helpers shared by ringloop's tests: skipping
// where the kernel refuses io_uring, loopback sockets, fd / mapping /
// goroutine leak checks, a watchdog, and waits for events (a condition, a
// thread asleep in its io_uring or epoll wait, a blocked goroutine, a
// readable fd, a queued connection) that tests use instead of sleeping. It
// is imported by _test.go files only, and like everything outside packages
// ring and internal/sock it does not import unsafe.
package testutil
