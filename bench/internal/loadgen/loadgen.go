//go:build linux

// Package loadgen is the echo load generator of the comparison harness.
//
// It is an event-loop client on epoll (golang.org/x/sys/unix): Threads
// OS-locked goroutines, each owning an edge-triggered epoll instance and a
// share of the connections on non-blocking sockets. A goroutine per
// connection would put the Go scheduler and netpoller between every request
// and its response and cost more client CPU than the servers under test at
// high connection counts; one epoll loop on its own CPU keeps the client
// cheap and its overhead the same for every server.
//
// What each connection sends is one endless byte stream, a pseudo-random
// pattern with a prime period seen from a per-connection offset, cut into
// messages of Size bytes. At most Depth messages are outstanding (sent and
// not fully echoed): depth 1 is request/response, larger depths pipeline.
// Every received byte is compared with the stream, so a lost, duplicated,
// reordered or corrupted byte is an error, and a message's latency runs from
// the write carrying its first byte to the read carrying its last one.
// Nothing is allocated per request: the stream is a shared read-only buffer,
// send times live in a per-connection ring of Depth slots, and latencies go
// into a fixed log-linear histogram per loop.
//
// A run is bounded in time and in count: a warm-up (not measured), then a
// measured window that ends after Duration or after Requests completed
// requests, whichever comes first.
package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/bench/internal/hist"
)

const (
	period   = 65521   // prime period of the stream pattern
	maxChunk = 1 << 18 // largest single read or write
)

// pattern holds period+maxChunk bytes so that any window of up to maxChunk
// bytes of the periodic stream is one contiguous slice.
var pattern = func() []byte {
	p := make([]byte, period+maxChunk)
	r := rand.New(rand.NewSource(0x7269_6e67))
	r.Read(p[:period])
	for i := period; i < len(p); i++ {
		p[i] = p[i-period]
	}
	return p
}()

// Config describes one run.
type Config struct {
	Addr           string        // server address, IPv4 host:port
	Conns          int           // connections
	Size           int           // message size in bytes
	Depth          int           // outstanding messages per connection
	Threads        int           // event-loop threads (default 1)
	Warmup         time.Duration // load before the measured window (may be 0)
	Duration       time.Duration // measured window, upper bound (> 0)
	Requests       uint64        // measured requests, upper bound (> 0)
	ConnectTimeout time.Duration // per connect (default 5 s)
	// UDP makes every connection a connected UDP socket (a peer) and
	// every message one datagram (udp.go).
	UDP bool
	// OnPhase, if set, is called when the measured window starts ("measure",
	// once every connection is up and warmed) and when it ends ("done",
	// before the connections are closed). It runs on a loop thread: keep it
	// short.
	OnPhase func(phase string)
}

// Result is what a run measured. Latencies are in nanoseconds.
type Result struct {
	Conns      int     `json:"conns"`
	Size       int     `json:"size"`
	Depth      int     `json:"depth"`
	Elapsed    float64 `json:"elapsed_s"`
	Requests   uint64  `json:"requests"`
	RPS        float64 `json:"rps"`
	MBps       float64 `json:"mbps"` // echoed payload, one direction, 10^6 bytes/s
	P50        uint64  `json:"p50_ns"`
	P99        uint64  `json:"p99_ns"`
	P999       uint64  `json:"p999_ns"`
	Max        uint64  `json:"max_ns"`
	Mean       float64 `json:"mean_ns"`
	Errors     uint64  `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	ClientCPU  float64 `json:"client_cpu_s"` // this process, measured window
	// MinShare is the requests the least served connection completed in
	// the measured window over the mean per connection: 1 when every
	// connection progressed alike, 0 when one got nothing. A server that
	// serves a few connections and starves the rest can post a higher
	// rate than one that is fair (a smaller working set); this tells them
	// apart.
	MinShare float64 `json:"min_conn_share"`
}

type conn struct {
	fd    int
	base  int    // stream offset of this connection
	tx    uint64 // stream bytes written
	rx    uint64 // stream bytes received and verified
	reqs  uint64 // requests completed in the measured window
	sent  []int64
	dead  bool
	index int
}

type worker struct {
	cfg       *Config
	run       *runState
	epfd      int
	conns     []*conn
	byFD      []*conn // indexed by fd
	h         hist.Hist
	reqs      uint64
	errs      uint64
	first     string
	rbuf      []byte
	wbuf      []byte // a UDP datagram being built
	expiredAt int64  // the last sweep for lost datagrams (UDP)
	evs       []unix.EpollEvent
	live      int
	endNs     int64
}

type runState struct {
	start     time.Time // monotonic origin
	measureNs int64     // offset of the measured window's start
	endNs     int64     // offset of its latest end
	measured  atomic.Uint64
	stopping  atomic.Bool
	stopped   atomic.Int32
	threads   int32
	phaseOnce sync.Once
	doneOnce  sync.Once
	errMu     sync.Mutex
}

func (c *Config) validate() error {
	switch {
	case c.Conns <= 0, c.Size <= 0, c.Depth <= 0:
		return errors.New("loadgen: conns, size and depth must be positive")
	case c.Duration <= 0 || c.Requests == 0:
		return errors.New("loadgen: a run needs both a duration and a request bound")
	case c.Size > maxChunk:
		return fmt.Errorf("loadgen: size above %d", maxChunk)
	case c.UDP && (c.Size < udpHeader || c.Size > 65507):
		return fmt.Errorf("loadgen: a UDP message needs %d to 65507 bytes", udpHeader)
	case c.Warmup < 0:
		return errors.New("loadgen: negative warm-up")
	}
	if c.Threads <= 0 {
		c.Threads = 1
	}
	if c.Threads > c.Conns {
		c.Threads = c.Conns
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	return nil
}

// Run connects, loads the server and reports. An error means the run could
// not start (bad config, connect failure); failures during the run are
// counted in Result.Errors.
func Run(cfg Config) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	sa, err := sockaddr(cfg.Addr)
	if err != nil {
		return Result{}, err
	}
	rs := &runState{threads: int32(cfg.Threads)}
	ws := make([]*worker, cfg.Threads)
	for i := range ws {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			closeAll(ws)
			return Result{}, fmt.Errorf("loadgen: epoll_create1: %w", err)
		}
		ws[i] = &worker{cfg: &cfg, run: rs, epfd: epfd,
			rbuf: make([]byte, maxChunk), wbuf: make([]byte, cfg.Size), evs: make([]unix.EpollEvent, 512)}
	}
	for i := 0; i < cfg.Conns; i++ {
		dialFn := dial
		if cfg.UDP {
			dialFn = dialUDP
		}
		fd, err := dialFn(sa, cfg.ConnectTimeout)
		if err != nil {
			closeAll(ws)
			return Result{}, fmt.Errorf("loadgen: connection %d of %d: %w", i+1, cfg.Conns, err)
		}
		w := ws[i%len(ws)]
		c := &conn{fd: fd, base: (i * 7919) % period, sent: make([]int64, cfg.Depth), index: i}
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
		if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
			unix.Close(fd)
			closeAll(ws)
			return Result{}, fmt.Errorf("loadgen: epoll_ctl: %w", err)
		}
		w.conns = append(w.conns, c)
		for len(w.byFD) <= fd {
			w.byFD = append(w.byFD, nil)
		}
		w.byFD[fd] = c
		w.live++
	}
	var cpu0, cpu1 float64
	rs.start = time.Now()
	rs.measureNs = int64(cfg.Warmup)
	rs.endNs = int64(cfg.Warmup + cfg.Duration)
	userPhase := cfg.OnPhase
	cfg.OnPhase = func(p string) {
		if p == "measure" {
			cpu0 = selfCPU()
		} else {
			cpu1 = selfCPU()
		}
		if userPhase != nil {
			userPhase(p)
		}
	}
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			w.loop()
		}()
	}
	wg.Wait()
	closeAll(ws)

	var res Result
	res.Conns, res.Size, res.Depth = cfg.Conns, cfg.Size, cfg.Depth
	var h hist.Hist
	var end int64
	for _, w := range ws {
		h.Merge(&w.h)
		res.Requests += w.reqs
		res.Errors += w.errs
		if res.FirstError == "" {
			res.FirstError = w.first
		}
		if w.endNs > end {
			end = w.endNs
		}
	}
	res.Elapsed = float64(end-rs.measureNs) / 1e9
	if res.Elapsed > 0 {
		res.RPS = float64(res.Requests) / res.Elapsed
		res.MBps = res.RPS * float64(cfg.Size) / 1e6
	}
	res.P50, res.P99, res.P999 = h.Quantile(0.50), h.Quantile(0.99), h.Quantile(0.999)
	res.Max, res.Mean = h.Max(), h.Mean()
	res.ClientCPU = cpu1 - cpu0
	res.MinShare = minShare(ws)
	return res, nil
}

func closeAll(ws []*worker) {
	for _, w := range ws {
		if w == nil {
			continue
		}
		for _, c := range w.conns {
			if !c.dead {
				unix.Close(c.fd)
				c.dead = true
			}
		}
		unix.Close(w.epfd)
	}
}

func (w *worker) now() int64 { return int64(time.Since(w.run.start)) }

func (w *worker) loop() {
	rs := w.run
	measuring := false
	for _, c := range w.conns {
		w.send(c, w.now())
	}
	for {
		now := w.now()
		if !measuring && now >= rs.measureNs {
			measuring = true
			rs.phaseOnce.Do(func() { w.cfg.OnPhase("measure") })
		}
		if now >= rs.endNs || rs.stopping.Load() || w.live == 0 {
			break
		}
		timeout := (rs.endNs - now) / 1e6
		if !measuring {
			timeout = (rs.measureNs - now) / 1e6
		}
		if timeout > 50 {
			timeout = 50
		}
		n, err := unix.EpollWait(w.epfd, w.evs, int(timeout)+1)
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			w.fail(nil, fmt.Errorf("epoll_wait: %w", err))
			break
		}
		if w.cfg.UDP {
			w.expireUDP(w.now())
		}
		for i := 0; i < n; i++ {
			ev := &w.evs[i]
			fd := int(ev.Fd)
			if fd >= len(w.byFD) {
				continue
			}
			c := w.byFD[fd]
			if c == nil || c.dead {
				continue
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				w.recv(c, measuring)
			}
			if !c.dead {
				w.send(c, w.now())
			}
		}
	}
	w.endNs = w.now()
	if rs.endNs < w.endNs && !rs.stopping.Load() {
		w.endNs = rs.endNs
	}
	if rs.stopped.Add(1) == rs.threads {
		rs.doneOnce.Do(func() { w.cfg.OnPhase("done") })
	}
}

// send writes as much of the allowed stream as the socket takes.
func (w *worker) send(c *conn, now int64) {
	if w.cfg.UDP {
		w.sendUDP(c, now)
		return
	}
	size := uint64(w.cfg.Size)
	limit := (c.rx/size + uint64(w.cfg.Depth)) * size
	for c.tx < limit && !w.run.stopping.Load() {
		n := limit - c.tx
		if n > maxChunk {
			n = maxChunk
		}
		off := (uint64(c.base) + c.tx) % period
		m, err := unix.Write(c.fd, pattern[off:off+n])
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				return
			}
			w.fail(c, fmt.Errorf("write: %w", err))
			return
		}
		// Stamp every message whose first byte this write carried.
		first := (c.tx + size - 1) / size
		c.tx += uint64(m)
		last := (c.tx + size - 1) / size
		for s := first; s < last; s++ {
			c.sent[s%uint64(w.cfg.Depth)] = now
		}
	}
}

// readFd reads once from c into w.rbuf, retrying EINTR. ok is false when
// the socket is drained (EAGAIN) or the read failed (reported to w.fail).
func (w *worker) readFd(c *conn) (n int, ok bool) {
	for {
		n, err := unix.Read(c.fd, w.rbuf)
		switch err {
		case nil:
			return n, true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, false
		}
		w.fail(c, fmt.Errorf("read: %w", err))
		return 0, false
	}
}

// recv reads until the socket is drained, verifying every byte.
func (w *worker) recv(c *conn, measuring bool) {
	if w.cfg.UDP {
		w.recvUDP(c, measuring)
		return
	}
	size := uint64(w.cfg.Size)
	rs := w.run
	for {
		n, ok := w.readFd(c)
		if !ok {
			return
		}
		if n == 0 {
			w.fail(c, errors.New("server closed the connection"))
			return
		}
		if c.rx+uint64(n) > c.tx {
			w.fail(c, fmt.Errorf("received %d bytes more than sent", c.rx+uint64(n)-c.tx))
			return
		}
		off := (uint64(c.base) + c.rx) % period
		want := pattern[off : off+uint64(n)]
		if !bytes.Equal(want, w.rbuf[:n]) {
			i := 0
			for i < n && want[i] == w.rbuf[i] {
				i++
			}
			w.fail(c, fmt.Errorf("echo mismatch at stream byte %d", c.rx+uint64(i)))
			return
		}
		now := w.now()
		first := c.rx / size
		c.rx += uint64(n)
		last := c.rx / size
		if measuring && now < rs.endNs {
			for s := first; s < last; s++ {
				lat := now - c.sent[s%uint64(w.cfg.Depth)]
				if lat < 0 {
					lat = 0
				}
				w.h.Record(uint64(lat))
				w.reqs++
				c.reqs++
				if rs.measured.Add(1) >= w.cfg.Requests {
					rs.stopping.Store(true)
					return
				}
			}
		}
		if n < len(w.rbuf) {
			return // edge-triggered: a short read means the socket is drained
		}
	}
}

func (w *worker) fail(c *conn, err error) {
	w.errs++
	if w.first == "" {
		if c != nil {
			w.first = fmt.Sprintf("connection %d: %v", c.index, err)
		} else {
			w.first = err.Error()
		}
	}
	if c != nil && !c.dead {
		c.dead = true
		unix.Close(c.fd)
		w.byFD[c.fd] = nil
		w.live--
	}
}

func sockaddr(addr string) (*unix.SockaddrInet4, error) {
	ta, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return nil, fmt.Errorf("loadgen: address %q: %w", addr, err)
	}
	sa := &unix.SockaddrInet4{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To4())
	return sa, nil
}

func dial(sa *unix.SockaddrInet4, timeout time.Duration) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	tv := unix.NsecToTimeval(int64(timeout))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("connect: %w", err)
	}
	tv = unix.Timeval{}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// selfCPU returns this process's user+system CPU seconds.
func selfCPU() float64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// minShare is the least measured request count of a connection over the
// mean of all connections (Result.MinShare); 0 without requests.
func minShare(ws []*worker) float64 {
	var total, least uint64
	n := 0
	for _, w := range ws {
		for _, c := range w.conns {
			if n == 0 || c.reqs < least {
				least = c.reqs
			}
			total += c.reqs
			n++
		}
	}
	if total == 0 {
		return 0
	}
	return float64(least) * float64(n) / float64(total)
}
