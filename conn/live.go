package conn

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ringloop/ringloop/loop"
)

// live holds the servers and datagram sockets that are open, in the order
// they opened, for Servers and PacketConns (what an exporter such as
// package metrics walks). A server stays from Listen until its listening
// sockets are closed and its last connection went through OnClose; a
// datagram socket until it is closed.
var live = struct {
	mu      sync.Mutex
	servers map[*Server]uint64     // the order it joined in
	packets map[*PacketConn]uint64 // the order it joined in
}{servers: map[*Server]uint64{}, packets: map[*PacketConn]uint64{}}

// liveSeq orders the entries of live by the moment they joined.
var liveSeq atomic.Uint64

func track[K comparable](m map[K]uint64, k K) {
	live.mu.Lock()
	m[k] = liveSeq.Add(1)
	live.mu.Unlock()
}

func untrack[K comparable](m map[K]uint64, k K) {
	live.mu.Lock()
	delete(m, k)
	live.mu.Unlock()
}

// members returns the keys of m whose group is g (all of them for a nil
// g), in the order they joined.
func members[K comparable](m map[K]uint64, g *loop.Group, group func(K) *loop.Group) []K {
	live.mu.Lock()
	type entry struct {
		k   K
		seq uint64
	}
	var es []entry
	for k, seq := range m {
		if g == nil || group(k) == g {
			es = append(es, entry{k, seq})
		}
	}
	live.mu.Unlock()
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(a.seq, b.seq) })
	ks := make([]K, len(es))
	for i, e := range es {
		ks[i] = e.k
	}
	return ks
}

// Servers returns the open servers (Listen, ListenFunc, ListenNet) whose
// connections live on g, or of every group when g is nil, in the order
// they were opened. A server is open until its listening sockets are
// closed and its last connection went through OnClose. Safe for
// concurrent use.
func Servers(g *loop.Group) []*Server {
	return members(live.servers, g, (*Server).Group)
}

// PacketConns returns the open datagram sockets (ListenPacket, DialPacket
// and the adapters over them) whose loop is one of g's, or of every group
// when g is nil, in the order they were opened. Safe for concurrent use.
func PacketConns(g *loop.Group) []*PacketConn {
	return members(live.packets, g, func(pc *PacketConn) *loop.Group { return pc.l.Group() })
}

// Group returns the group whose loops serve the server's connections.
// Safe for concurrent use.
func (s *Server) Group() *loop.Group { return s.workers }

// maybeUntrack takes s out of Servers once its listening sockets are
// closed and it has no live connection.
func (s *Server) maybeUntrack() {
	if s.openListeners.Load() == 0 && s.live.Load() == 0 {
		untrack(live.servers, s)
	}
}
