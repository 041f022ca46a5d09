//go:build ringfault && linux

package loop

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/ring"
)

// The io_uring driver's side of the fault-injection mode (fault_on.go).

// uringFaults is one uring driver's fault-injection state: the fake
// results planned for its ops, by slot, and the provided buffers held back
// for fake failures. Loop goroutine only.
type uringFaults struct {
	plans []faultPlan
	held  []uint16
}

// faultPlan is a fake result planned for an op (by slot; gen names the
// op).
type faultPlan struct {
	gen uint32
	res int32
}

// prep may change the SQE just prepared for o: a shorter send, or a NOP
// standing for the op, whose completion result turns into a fake result.
func (f *uringFaults) prep(sqe *ring.SQE, o *op) {
	if res := fakeResult(o.tag); res != 0 {
		ud := sqe.UserData
		sqe.PrepNop()
		sqe.UserData = ud
		if int(o.slot) >= len(f.plans) {
			f.plans = append(f.plans, make([]faultPlan, int(o.slot)+opChunk-len(f.plans))...)
		}
		f.plans[o.slot] = faultPlan{gen: o.gen, res: res}
		return
	}
	switch o.tag {
	case tagSend:
		sqe.Len = uint32(faultSendLen(int(sqe.Len)))
	case tagSendmsg:
		if n := len(o.extras().iov); n > 1 {
			if k := faultSendLen(n); k < n {
				o.extras().msg.SetIovlen(k)
			}
		}
	}
}

// result turns the NOP completion of an op prep replaced into its fake
// result. A fake failure of a provided receive may carry a buffer held
// back by holdBuf, as some kernels post a failed receive with the buffer
// it selected; br is the driver's current buffer ring.
func (f *uringFaults) result(c *ring.CQE, br *ring.BufRing) {
	tag, gen, slot := unpackUserData(c.UserData)
	if int(slot) >= len(f.plans) || f.plans[slot].res == 0 || f.plans[slot].gen != gen {
		return
	}
	c.Res, c.Flags = f.plans[slot].res, 0
	f.plans[slot] = faultPlan{}
	if tag == tagRecvBuf && len(f.held) > 0 { // held buffers are the stream ring's
		bid := f.held[len(f.held)-1]
		f.held = f.held[:len(f.held)-1]
		// Back in the kernel's hands, unpublished: it "selected" it.
		br.Add(bid, 0)
		c.Flags = ring.CQEFBuffer | uint32(bid)<<ring.CQEBufferShift
		faults.bufsOnFailure.Add(1)
	}
}

// holdBuf may keep buffer bid of br (its data delivered) from going back
// to the ring, for a later fake failure to carry: only a buffer of current,
// the driver's current buffer ring. At most two are held, so the ring never
// runs dry because of it.
func (f *uringFaults) holdBuf(br, current *ring.BufRing, bid uint16) bool {
	if br != current || len(f.held) >= 2 {
		return false
	}
	if ok, _ := roll(func(f *Faults) float64 { return f.BufOnFailure }, 0, nil); !ok {
		return false
	}
	f.held = append(f.held, bid)
	return true
}

// reapMax may cut a poll's reap to one completion.
func (f *uringFaults) reapMax(max int) int {
	if ok, _ := roll(func(f *Faults) float64 { return f.ReapOne }, 0, &faults.reapOnes); ok {
		return 1
	}
	return max
}

// hide may hide from a rebuild a final completion that carries no data (a
// -ECANCELED), so its op is given up at the deadline.
func (f *uringFaults) hide(c *ring.CQE) bool {
	if c.Res != -int32(unix.ECANCELED) || c.Flags&(ring.CQEFMore|ring.CQEFBuffer) != 0 {
		return false
	}
	ok, _ := roll(func(f *Faults) float64 { return f.GiveUp }, 0, &faults.giveUps)
	return ok
}

// rebuildTimeout is the deadline of a rebuild that starts now: the
// config's, else timeout.
func (f *uringFaults) rebuildTimeout(timeout time.Duration) time.Duration {
	if c, ok := faultConfig(); ok && c.RebuildTimeout > 0 {
		return c.RebuildTimeout
	}
	return timeout
}

// dropHeld forgets the buffers held back: their buffer ring goes (a
// rebuild).
func (f *uringFaults) dropHeld() { f.held = f.held[:0] }

// bufRing may fail the buffer-ring registration of a rebuild's new ring
// (started: the driver has started, so the ring is a rebuild's).
func (f *uringFaults) bufRing(started bool) error {
	if !started {
		return nil
	}
	if ok, _ := roll(func(f *Faults) float64 { return f.BufRingFail }, 0, &faults.bufRingFails); ok {
		return unix.EINVAL
	}
	return nil
}
