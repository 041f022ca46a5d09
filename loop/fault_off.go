//go:build !ringfault || !linux

package loop

import (
	"time"

	"github.com/ringloop/ringloop/ring"
)

// faultsEnabled is false in ordinary builds: every fault hook below is an
// empty inline function and the checks guarding them compile away. The
// ringfault build tag turns the fault-injection mode on (fault_on.go).
const faultsEnabled = false

// uringFaults is the uring driver's fault-injection state
// (driver_uring_fault.go): nothing in ordinary builds.
type uringFaults struct{}

func (*uringFaults) prep(*ring.SQE, *op)                                {}
func (*uringFaults) result(*ring.CQE, *ring.BufRing)                    {}
func (*uringFaults) holdBuf(br, current *ring.BufRing, bid uint16) bool { return false }
func (*uringFaults) reapMax(max int) int                                { return max }
func (*uringFaults) hide(*ring.CQE) bool                                { return false }
func (*uringFaults) rebuildTimeout(t time.Duration) time.Duration       { return t }
func (*uringFaults) dropHeld()                                          {}
func (*uringFaults) bufRing(started bool) error                         { return nil }

func fakeResult(opTag) int32 { return 0 }
func faultSendLen(n int) int { return n }

func faultStart() error  { return nil }
func faultRebuild() bool { return false }
