//go:build linux

package ring_test

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/ring"
)

// ExampleNew submits a batch of NOPs and reaps their completions.
// (Compile-only: it needs a kernel with io_uring.)
func ExampleNew() {
	r, err := ring.New(64, nil)
	if errors.Is(err, ring.ErrNotSupported) {
		fmt.Println("io_uring unavailable:", err)
		return
	}
	if err != nil {
		panic(err)
	}
	defer r.Close()

	for i := range 8 {
		sqe, err := r.GetSQE()
		if err != nil { // ring.ErrSQFull: Submit, then retry
			panic(err)
		}
		sqe.PrepNop()
		sqe.UserData = uint64(i + 1)
	}
	if _, err := r.SubmitAndWait(8); err != nil {
		panic(err)
	}
	var cqes [8]ring.CQE
	n := r.PeekBatch(cqes[:])
	for _, c := range cqes[:n] {
		fmt.Println(c.UserData, c.Res)
	}
	r.CQAdvance(uint32(n))
}

// ExampleRing_WaitCQETimeout waits at most 10ms for a completion.
func ExampleRing_WaitCQETimeout() {
	r, err := ring.New(8, nil)
	if err != nil {
		return
	}
	defer r.Close()
	c, err := r.WaitCQETimeout(10 * time.Millisecond)
	switch {
	case errors.Is(err, unix.ETIME):
		fmt.Println("nothing completed")
	case err == nil:
		fmt.Println("completed:", c.UserData, c.Err())
		r.CQESeen()
	}
}

// ExampleRing_NewBufRing receives with a provided-buffer ring.
func ExampleRing_NewBufRing() {
	r, err := ring.New(8, nil)
	if err != nil {
		return
	}
	defer r.Close()
	br, err := r.NewBufRing(1, 16, 4096) // group 1: 16 buffers of 4 KiB
	if err != nil {
		return
	}
	fd := 0 // a connected socket
	sqe, _ := r.GetSQE()
	sqe.PrepRecvMultishot(fd, 0)
	sqe.SetBufferGroup(br.Group())
	r.Submit()

	c, err := r.WaitCQETimeout(time.Second)
	if err != nil {
		return
	}
	if data, bid, ok := br.Take(c); ok {
		fmt.Printf("%d bytes in buffer %d\n", len(data), bid)
		br.Recycle(bid) // data must not be used after this
	}
	r.CQESeen()
}
