package ring

// BufferID returns the provided-buffer id the kernel picked for this
// completion, and whether there is one (CQEFBuffer).
func (c *CQE) BufferID() (uint16, bool) {
	if c.Flags&CQEFBuffer == 0 {
		return 0, false
	}
	return uint16(c.Flags >> CQEBufferShift), true
}

// More reports whether a multishot op stays armed after this completion
// (CQEFMore).
func (c *CQE) More() bool { return c.Flags&CQEFMore != 0 }

// Err returns the completion's error (nil when Res >= 0), keeping the errno.
func (c *CQE) Err() error {
	if c.Res >= 0 {
		return nil
	}
	return Errno(c.Res)
}
