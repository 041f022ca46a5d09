package ring

import "unsafe"

// The helpers below are the only place where Go memory becomes an address
// the kernel will read or write asynchronously.
//
// Safety: the caller of any Prep method that takes a slice or a pointer must
// keep that memory reachable from a live Go object (for the event loop: the
// op table) until the final CQE of the SQE that carries its address. The SQ
// ring is mmap'd memory that the garbage collector does not scan, so an
// address stored there keeps nothing alive. Storing the slice in a heap
// object also makes it escape, so a goroutine stack (which can move) is
// never handed to the kernel.

// bufAddr returns the address of the first byte of p, or 0 for an empty slice.
func bufAddr(p []byte) uint64 {
	if len(p) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p))))
}

// ptrAddr returns the address of the value p points at, or 0 for nil.
func ptrAddr[T any](p *T) uint64 {
	return uint64(uintptr(unsafe.Pointer(p)))
}
