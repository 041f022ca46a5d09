package loop

import (
	"slices"
	"sync"
)

// groups holds the groups that have not terminated, in the order they were
// made, for Groups.
var groups struct {
	mu   sync.Mutex
	live []*Group
}

func trackGroup(g *Group) {
	groups.mu.Lock()
	groups.live = append(groups.live, g)
	groups.mu.Unlock()
}

func untrackGroup(g *Group) {
	groups.mu.Lock()
	if i := slices.Index(groups.live, g); i >= 0 {
		groups.live = slices.Delete(groups.live, i, i+1)
	}
	groups.mu.Unlock()
}

// Groups returns the groups of the process that have not terminated, in
// the order NewGroup made them: what an exporter such as package metrics
// walks. Safe for concurrent use.
func Groups() []*Group {
	groups.mu.Lock()
	defer groups.mu.Unlock()
	return slices.Clone(groups.live)
}
