//go:build !linux

package conn

import "github.com/ringloop/ringloop/loop"

// startResetSweep: no io_uring, no sweep (resetsweep_linux.go).
func (r *loopConns) startResetSweep(*loop.Loop) {}
