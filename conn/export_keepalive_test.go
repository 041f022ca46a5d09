package conn

// Fd returns c's file descriptor, for tests that read its socket options.
func Fd(c *Conn) int { return int(c.fd) }
