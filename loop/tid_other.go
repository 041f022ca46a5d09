//go:build !linux

package loop

// gettid returns 0 off Linux, where no loop ever starts.
func gettid() int32 { return 0 }
