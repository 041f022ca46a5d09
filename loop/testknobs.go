package loop

import (
	"time"

	"github.com/ringloop/ringloop/internal/testknobs"
	"github.com/ringloop/ringloop/sched"
)

// The settings only tests set, and the rebuilds they ask for
// (internal/testknobs); validate checks the settings as it checks options.
func init() {
	testknobs.Clock = func(clk sched.Clock) any { return Option(func(c *config) { c.clock = clk }) }
	testknobs.Tick = func(d time.Duration) any { return Option(func(c *config) { c.tick = d }) }
	testknobs.MaxOps = func(n uint32) any { return Option(func(c *config) { c.maxOps = n }) }
	testknobs.DrainTimeout = func(d time.Duration) any { return Option(func(c *config) { c.drainTimeout = d }) }
	testknobs.Kernel = func(v string) any { return Option(func(c *config) { c.kernel = v }) }
	testknobs.RebuildRing = func(l any) error { return l.(*Loop).rebuildRing() }
	testknobs.RebuildRings = func(g any) error { return g.(*Group).rebuildRings() }
}
