package metrics

import (
	"encoding/json"
	"expvar"
	"sync"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// A Snapshot is every live group of the process (loop.Groups) with its
// loops' statistics, its servers and its datagram sockets, as Take read
// them. Each counter is exact; the counters together are not one
// instant's (each is read on its own, without stopping the loops).
type Snapshot struct {
	Groups []Group `json:"groups"`
}

// A Group is one group of a Snapshot.
type Group struct {
	Name        string       `json:"name"`    // the group's name, as loop.Group.String
	Backend     string       `json:"backend"` // "uring" or "epoll"
	Loops       []Loop       `json:"loops"`
	Servers     []Server     `json:"servers"`      // open servers whose connections live on the group
	PacketConns []PacketConn `json:"packet_conns"` // open datagram sockets on the group's loops
}

// A Loop is one loop's loop.Stats, with its state and backend as words.
type Loop struct {
	loop.Stats
	State   string `json:"State"`
	Backend string `json:"Backend"`
}

// A Server is one server's counters (conn.ServerStats) and address.
type Server struct {
	Network string `json:"network"` // "tcp" or "unix"
	Addr    string `json:"addr"`
	conn.ServerStats
}

// A PacketConn is one datagram socket's counters (conn.PacketStats), its
// address and its loop.
type PacketConn struct {
	Network string `json:"network"`
	Addr    string `json:"addr"`
	Loop    string `json:"loop"`
	conn.PacketStats
}

// Take reads every live group's statistics. Safe for concurrent use; it
// makes a few system calls per server and datagram socket (their accept
// queues and kernel drops are read from the sockets) and none on the loops.
func Take() Snapshot {
	var s Snapshot
	for _, g := range loop.Groups() {
		gs := g.Stats()
		sg := Group{Name: g.String(), Backend: g.Backend().String(), Loops: make([]Loop, len(gs.Loops))}
		for i, ls := range gs.Loops {
			sg.Loops[i] = Loop{Stats: ls, State: ls.State.String(), Backend: ls.Backend.String()}
		}
		for _, srv := range conn.Servers(g) {
			addr := srv.Addr()
			sg.Servers = append(sg.Servers, Server{Network: addr.Network(), Addr: addr.String(), ServerStats: srv.Stats()})
		}
		for _, pc := range conn.PacketConns(g) {
			p := PacketConn{Loop: pc.Loop().String(), PacketStats: pc.Stats()}
			if addr := pc.LocalAddr(); addr != nil {
				p.Network, p.Addr = addr.Network(), addr.String()
			}
			sg.PacketConns = append(sg.PacketConns, p)
		}
		s.Groups = append(s.Groups, sg)
	}
	return s
}

// ExpvarName is the name Publish gives the expvar variable.
const ExpvarName = "ringloop"

var publishOnce sync.Once

// Publish registers the expvar variable "ringloop", whose value is Take's
// snapshot as JSON, read afresh at each request of /debug/vars (or
// expvar.Get("ringloop").String()). It registers once: later calls do
// nothing. Nothing is registered at import; a program that wants the
// variable calls Publish. Safe for concurrent use.
func Publish() {
	publishOnce.Do(func() { expvar.Publish(ExpvarName, expvar.Func(func() any { return Take() })) })
}

// String returns the snapshot as JSON, as /debug/vars shows it.
func (s Snapshot) String() string {
	b, err := json.Marshal(s)
	if err != nil {
		return "{}"
	}
	return string(b)
}
