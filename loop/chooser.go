package loop

import "sync/atomic"

// chooser picks the loop for Group.Next: plain round robin over a 64-bit
// counter, masked when the loop count is a power of two (Netty's
// PowerOfTwoEventExecutorChooser) and reduced modulo the count otherwise
// (GenericEventExecutorChooser). The counter is unsigned, so the modulo needs
// no Math.abs guard; the mask path stays exact across the counter's
// wrap-around (2^64 is a multiple of every power of two), and the modulo path
// would need 2^64 calls to wrap.
type chooser struct {
	loops   uint64
	mask    uint64 // n-1 when n is a power of two, else 0
	counter atomic.Uint64
}

func newChooser(n int) *chooser {
	c := &chooser{loops: uint64(n)}
	if n&(n-1) == 0 {
		c.mask = uint64(n) - 1
	}
	return c
}

// next returns the index of the next loop. Safe for concurrent use.
func (c *chooser) next() int {
	i := c.counter.Add(1) - 1
	if c.mask != 0 || c.loops == 1 {
		return int(i & c.mask)
	}
	return int(i % c.loops)
}
