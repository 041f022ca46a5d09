//go:build !ringfault || !linux

package loop

import "github.com/ringloop/ringloop/ring"

// faultsEnabled is false in ordinary builds: every fault hook below is an
// empty inline function and the checks guarding them compile away. The
// ringfault build tag turns the fault-injection mode on (fault_on.go).
const faultsEnabled = false

func (d *uringDriver) faultPrep(*ring.SQE, *op)                {}
func (d *uringDriver) faultResult(*ring.CQE)                   {}
func (d *uringDriver) faultHoldBuf(*ring.BufRing, uint16) bool { return false }
func (d *uringDriver) faultReapMax(max int) int                { return max }
func (d *uringDriver) faultHide(*ring.CQE) bool                { return false }
func (d *uringDriver) faultRebuilt()                           {}
func (d *uringDriver) faultBufRing() error                     { return nil }
func (d *epollDriver) faultSubmit(*op) bool                    { return false }
func faultSendLen(n int) int                                   { return n }

func faultStart() error  { return nil }
func faultRebuild() bool { return false }
