package loop

import "sync"

// Quarantine (docs/op-lifecycle.md, "Memory and the kernel's final word"):
// memory the kernel may still use (an op's buffers and its record) is
// reused only after the op's final completion. Where that never comes (an
// op given up), the record and everything it references are kept here for
// the life of the process: a leak is a bug report, a buffer reused while
// the kernel still reads it sends one connection's bytes on another's.

// quarantined keeps given-up op records (and, through them, their buffers)
// reachable forever.
var quarantined struct {
	sync.Mutex
	ops   []*op
	bytes uint64
}

// quarantine moves o's memory into quarantine, with extra bytes kept on
// its account elsewhere, and returns the bytes it counted. The caller
// retires o's slot (the record's slab chunk stays reachable through o).
func quarantine(o *op, extra uint64) uint64 {
	n := uint64(len(o.buf)) + extra
	if o.extra != nil {
		for _, b := range o.extra.bufs {
			n += uint64(len(b))
		}
	}
	quarantined.Lock()
	quarantined.ops = append(quarantined.ops, o)
	quarantined.bytes += n
	quarantined.Unlock()
	return n
}

// quarantinedBytes reports the bytes held in quarantine, process-wide
// (Stats.ProcessQuarantinedBytes).
func quarantinedBytes() uint64 {
	quarantined.Lock()
	defer quarantined.Unlock()
	return quarantined.bytes
}

// abandon implements completionSink: it delivers the final completion of
// an op the backend gave up on, with Completion.Quarantined set. The op's
// record and buffers are quarantined and its slot retired (never reused);
// extra counts other quarantined memory the backend attributes to it (a
// provided-buffer ring kept mapped).
func (io *IO) abandon(ud uint64, res int32, flags uint32, extra uint64) {
	o := io.ops.lookup(ud)
	if o == nil {
		io.l.stats.stale.Add(1)
		return
	}
	c := o.completer
	n := quarantine(o, extra)
	io.ops.retire(o)
	io.l.stats.quarantined.Add(1)
	io.l.stats.quarantinedBytes.Add(n)
	io.l.stats.completions.Add(1)
	io.current = Completion{Res: res, Flags: flags, Quarantined: true}
	io.deliverCompletion(c)
}
