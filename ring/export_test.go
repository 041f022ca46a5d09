package ring

// SetSysSetup replaces io_uring_setup for New (and the setup-flag probe)
// and returns a function restoring the real one. Tests use it to force an
// errno. Not safe for concurrent use with New.
func SetSysSetup(f func(entries uint32, p *Params) (int, error)) (restore func()) {
	old := sysSetupFn
	sysSetupFn = f
	return func() { sysSetupFn = old }
}

// MemAddr returns the start of the buffer ring's mapping.
func (b *BufRing) MemAddr() uintptr { return uintptr(b.mem) }

// SQFlags returns the SQ ring flags word.
func (r *Ring) SQFlags() uint32 { return r.sqFlags() }
