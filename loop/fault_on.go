//go:build ringfault && linux

package loop

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The fault-injection mode (build tag ringfault), in the spirit of
// FoundationDB's BUGGIFY: the backends drive their rare paths under real
// traffic, at the probabilities SetFaults gives. Every fault is one the
// kernel or a rebuild can produce on its own; none changes the bytes a
// correct program sends or receives, so an end-to-end test that checks
// every byte proves the rare paths keep the streams intact.
//
//   - Short sends: a send or sendmsg is handed to the kernel with fewer
//     bytes (fewer iovecs) than asked, so the caller continues a partial
//     write.
//   - Fake results: an I/O op completes, without running, with -EAGAIN or
//     -EINTR (retryable), -ENOBUFS (a provided-buffer receive: the ring ran
//     dry) or -ECANCELED (fatal for a stream connection: nobody canceled
//     it; a datagram socket arms its receive again, or sends the datagram
//     again, since neither took anything).
//     On io_uring the op's SQE becomes a NOP with the same user_data.
//   - F_BUFFER on failure (io_uring): a provided receive's buffer is held
//     back after its data was delivered, then handed over with a fake
//     failure, as some kernels post a failed receive with its buffer.
//   - CQ overflow (io_uring): a poll reaps a single completion, so the
//     CQ fills and the kernel's overflow list takes the rest.
//   - Forced rebuilds: a loop turn replaces its ring (epoll instance).
//   - Give-ups (io_uring): a rebuild does not see an op's final
//     completion when it carries no data (a -ECANCELED), so it reaches the
//     rebuild's deadline and is given up: quarantined.
//   - A failed buffer-ring registration on a rebuild's new ring.

// Faults sets the probabilities of the fault-injection mode; zero values
// inject nothing. Only in builds with the ringfault tag.
type Faults struct {
	Seed uint64

	ShortSend float64 // per send: hand the kernel fewer bytes
	Retry     float64 // per I/O op: complete with -EAGAIN or -EINTR instead of running
	NoBufs    float64 // per provided receive: complete with -ENOBUFS instead of running (when > 0, always the first after SetFaults)
	Cancel    float64 // per I/O op: complete with -ECANCELED instead of running (fatal)

	BufOnFailure float64 // per provided receive with data: hold its buffer back for a fake failure
	ReapOne      float64 // per poll: reap one completion only

	Rebuild        float64       // per loop turn: rebuild the ring
	GiveUp         float64       // per -ECANCELED final completion seen by a rebuild: hide it
	RebuildTimeout time.Duration // a rebuild's deadline (0: the default, 1 s)
	BufRingFail    float64       // per rebuild: the new ring's buffer ring registration fails
	StartFail      float64       // per loop start: the backend fails to start (the loop terminates)
}

// FaultCounts reports how many faults of each kind were injected.
type FaultCounts struct {
	ShortSends, Retries, NoBufs, Cancels       uint64
	BufsOnFailure, ReapOnes, Rebuilds, GiveUps uint64
	BufRingFails, StartFails                   uint64
}

var faults struct {
	mu  sync.Mutex
	on  bool
	cfg Faults
	rng *rand.Rand
	// noBufsDue: the next provided receive completes with -ENOBUFS
	// whatever the roll (set by SetFaults, so that a run with few
	// receives armed, as multishot ones are, still takes that path).
	noBufsDue bool

	shortSends, retries, noBufs, cancels       atomic.Uint64
	bufsOnFailure, reapOnes, rebuilds, giveUps atomic.Uint64
	bufRingFails, startFails                   atomic.Uint64
}

// SetFaults turns fault injection on with f for every loop of the process
// until restore is called. Only in builds with the ringfault tag.
func SetFaults(f Faults) (restore func()) {
	faults.mu.Lock()
	faults.on, faults.cfg = true, f
	faults.rng = rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	faults.noBufsDue = f.NoBufs > 0
	faults.mu.Unlock()
	return func() {
		faults.mu.Lock()
		faults.on = false
		faults.mu.Unlock()
	}
}

// InjectedFaults returns the counts of faults injected so far.
func InjectedFaults() FaultCounts {
	return FaultCounts{
		ShortSends: faults.shortSends.Load(), Retries: faults.retries.Load(),
		NoBufs: faults.noBufs.Load(), Cancels: faults.cancels.Load(),
		BufsOnFailure: faults.bufsOnFailure.Load(), ReapOnes: faults.reapOnes.Load(),
		Rebuilds: faults.rebuilds.Load(), GiveUps: faults.giveUps.Load(),
		BufRingFails: faults.bufRingFails.Load(), StartFails: faults.startFails.Load(),
	}
}

const faultsEnabled = true

// roll reports true with probability p (read under the lock with the
// config), and returns a random number in [0, n) alongside when n > 0.
// count, if not nil, counts a hit.
func roll(p func(*Faults) float64, n int, count *atomic.Uint64) (bool, int) {
	faults.mu.Lock()
	defer faults.mu.Unlock()
	if !faults.on {
		return false, 0
	}
	pr := p(&faults.cfg)
	if pr <= 0 || faults.rng.Float64() >= pr {
		return false, 0
	}
	if count != nil {
		count.Add(1)
	}
	if n > 0 {
		return true, faults.rng.IntN(n)
	}
	return true, 0
}

// takeNoBufsDue reports, once after SetFaults with NoBufs > 0, that a
// provided receive is to complete with -ENOBUFS, and counts it.
func takeNoBufsDue() bool {
	faults.mu.Lock()
	defer faults.mu.Unlock()
	if !faults.on || !faults.noBufsDue {
		return false
	}
	faults.noBufsDue = false
	faults.noBufs.Add(1)
	return true
}

func faultConfig() (Faults, bool) {
	faults.mu.Lock()
	defer faults.mu.Unlock()
	return faults.cfg, faults.on
}

// faultRebuild reports whether a turn rebuilds the loop's backend as it
// starts.
func faultRebuild() bool {
	ok, _ := roll(func(f *Faults) float64 { return f.Rebuild }, 0, &faults.rebuilds)
	return ok
}

// fakeResult picks a fake result for an I/O op of tag, or 0.
func fakeResult(tag opTag) int32 {
	switch tag {
	case tagRecv, tagRecvBuf, tagRecvmsgBuf, tagSend, tagSendmsg:
	default:
		return 0
	}
	if ok, _ := roll(func(f *Faults) float64 { return f.Cancel }, 0, &faults.cancels); ok {
		return -int32(unix.ECANCELED)
	}
	if tag.providedRecv() {
		if takeNoBufsDue() {
			return -int32(unix.ENOBUFS)
		}
		if ok, _ := roll(func(f *Faults) float64 { return f.NoBufs }, 0, &faults.noBufs); ok {
			return -int32(unix.ENOBUFS)
		}
	}
	if ok, k := roll(func(f *Faults) float64 { return f.Retry }, 2, &faults.retries); ok {
		if k == 0 {
			return -int32(unix.EAGAIN)
		}
		return -int32(unix.EINTR)
	}
	return 0
}

// faultSendLen shortens a send of n bytes.
func faultSendLen(n int) int {
	if n < 2 {
		return n
	}
	if ok, k := roll(func(f *Faults) float64 { return f.ShortSend }, n-1, &faults.shortSends); ok {
		return 1 + k
	}
	return n
}

// errFaultStart is the cause of an injected start failure.
var errFaultStart = errors.New("loop: injected fault: backend start failed")

// faultStart may fail a loop's start.
func faultStart() error {
	if ok, _ := roll(func(f *Faults) float64 { return f.StartFail }, 0, &faults.startFails); ok {
		return errFaultStart
	}
	return nil
}
