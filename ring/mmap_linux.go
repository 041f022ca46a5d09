package ring

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmapRing maps size bytes of the io_uring instance fd at offset (offSQRing,
// offCQRing, offSQEs or a offPbufRing offset). The mapping is shared with the
// kernel and populated up front so the first submissions do not fault.
//
// The returned memory is outside the Go heap: the garbage collector neither
// scans nor frees it, and checkptr accepts unsafe.Add / unsafe.Slice on it.
func mmapRing(fd int, offset int64, size uintptr) (unsafe.Pointer, error) {
	p, err := unix.MmapPtr(fd, offset, nil, size,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// mmapAnon maps size bytes of zeroed, page-aligned anonymous memory for the
// kernel to read and write asynchronously (provided-buffer rings and their
// buffers), off the Go heap like the runtime's persistentalloc.
func mmapAnon(size uintptr) (unsafe.Pointer, error) {
	p, err := unix.MmapPtr(-1, 0, nil, size,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// mmapAnonLazy is mmapAnon without populating the pages: each is backed
// when it is first written, and never by a huge page, so memory the kernel
// never writes into costs address space only.
func mmapAnonLazy(size uintptr) (unsafe.Pointer, error) {
	p, err := unix.MmapPtr(-1, 0, nil, size,
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	// Advice only: a kernel without transparent huge pages refuses it.
	_ = unix.Madvise(unsafe.Slice((*byte)(p), size), unix.MADV_NOHUGEPAGE)
	return p, nil
}

// munmap releases a mapping made by mmapRing, mmapAnon or mmapAnonLazy;
// nil is a no-op.
func munmap(p unsafe.Pointer, size uintptr) error {
	if p == nil {
		return nil
	}
	return unix.MunmapPtr(p, size)
}
