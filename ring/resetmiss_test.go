//go:build linux

package ring_test

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/ring"
)

// TestRecvResetMiss reproduces, on the ring alone, a kernel behaviour
// the runtime works around (docs/kernel-support.md, "Receives that miss a
// reset"): a multishot IORING_OP_RECV with IORING_RECV_MULTISHOT and a
// provided-buffer ring, armed on an accepted TCP socket whose peer sends a
// few bytes and then resets (SO_LINGER 0 and close), now and then posts
// the bytes with F_MORE and then never posts its final completion,
// although the socket is reset (TCP_CLOSE, ECONNRESET pending). The
// connection's owner is never told, and the fd stays open.
//
// Each cycle: a client thread connects over loopback, writes 16 bytes and
// resets; the ring accepts (multishot accept) and arms a receive on the
// accepted socket. A receive whose final completion (ECONNRESET, or 0 at
// a FIN) has not come 300 ms after it was armed is canceled; if the
// cancel's ECANCELED is its first final word while TCP_INFO says the
// socket is closed, the kernel missed the reset: a miss. The test reports
// the misses and the kernel release with t.Logf and fails only on a
// harness problem (a syscall error, a receive that neither completes nor
// answers its cancel), so CI passes on a kernel with the behaviour.
//
// The suite runs the multishot case for about two seconds. Set
// RINGLOOP_RESET_CYCLES=N to run N cycles of each case with no time
// bound: multishot and single-shot receives, a reset after data, a reset
// with no data, and a FIN after data, e.g.
//
//	RINGLOOP_RESET_CYCLES=200000 go test ./ring/ -run TestRecvResetMiss -v -timeout 30m
//
// On Linux 6.18 (AMD EPYC, 2 cores) the multishot receive missed the
// reset about once in 5,000 cycles; the other cases never did.
func TestRecvResetMiss(t *testing.T) {
	testutil.RequireKernel(t, "6.1")
	long, _ := strconv.Atoi(os.Getenv("RINGLOOP_RESET_CYCLES"))
	cases := []resetCase{{name: "multishot/data+reset", multishot: true, data: true, reset: true}}
	if long > 0 {
		cases = append(cases,
			resetCase{name: "single/data+reset", data: true, reset: true},
			resetCase{name: "multishot/reset", multishot: true, reset: true},
			resetCase{name: "multishot/data+fin", multishot: true, data: true})
	}
	var uts unix.Utsname
	unix.Uname(&uts)
	release := unix.ByteSliceToString(uts.Release[:])
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cycles, budget := long, time.Duration(0)
			if long == 0 {
				cycles, budget = 1<<30, 2*time.Second
			}
			st := runResetCycles(t, tc, cycles, budget)
			t.Logf("kernel %s, %s: %d cycles in %v, %d receives missed their final completion (socket reset, only the cancel ended them), %d ended only by the cancel on a live socket",
				release, tc.name, st.cycles, st.took.Round(time.Millisecond), st.misses, st.slow)
		})
	}
}

type resetCase struct {
	name      string
	multishot bool // IORING_RECV_MULTISHOT, else single shots re-armed
	data      bool // the client writes 16 bytes first
	reset     bool // SO_LINGER 0 before close, else a FIN
}

type resetStats struct {
	cycles, misses, slow int
	took                 time.Duration
}

// resetRecv is one accepted socket and its receive.
type resetRecv struct {
	fd       int
	armed    time.Time
	canceled bool
	closed   bool // TCP_INFO said TCP_CLOSE when the cancel was sent
}

const (
	udAccept = 1 << 62
	udCancel = 1 << 61
)

func runResetCycles(t *testing.T, tc resetCase, cycles int, budget time.Duration) resetStats {
	if budget > 0 {
		testutil.Watchdog(t, budget+30*time.Second)
	} else {
		testutil.Watchdog(t, time.Duration(cycles/1000)*time.Second+60*time.Second)
	}
	// SINGLE_ISSUER: one thread submits.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := ring.New(256, &ring.Params{
		Flags:     ring.SetupCQSize | ring.SetupSingleIssuer | ring.SetupDeferTaskrun,
		CQEntries: 4096,
	})
	if err != nil {
		t.Fatalf("ring.New: %v", err)
	}
	defer r.Close()
	const bgid, nbufs, bufSize = 3, 512, 256
	br, err := r.NewBufRing(bgid, nbufs, bufSize)
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	lfd, addr := testutil.ListenFd(t)

	sqe := func() *ring.SQE {
		s, err := r.GetSQE()
		if errors.Is(err, ring.ErrSQFull) {
			if _, err := r.Submit(); err != nil {
				t.Fatalf("Submit: %v", err)
			}
			s, err = r.GetSQE()
		}
		if err != nil {
			t.Fatalf("GetSQE: %v", err)
		}
		return s
	}
	armAccept := func() {
		s := sqe()
		s.PrepMultishotAccept(lfd, nil, nil, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		s.UserData = udAccept
	}
	armRecv := func(fd int) {
		s := sqe()
		if tc.multishot {
			s.PrepRecvMultishot(fd, 0)
		} else {
			s.PrepRecv(fd, nil, 0)
		}
		s.SetBufferGroup(bgid)
		s.UserData = uint64(fd)
	}
	armAccept()

	// The client: connect, write, reset or FIN, with at most 64
	// connections whose server side is still open.
	slots := make(chan struct{}, 64)
	stop := make(chan struct{})
	clientErr := make(chan error, 1)
	sent := make(chan int, 1)
	var open map[int]*resetRecv
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
		}
		for _, rc := range open {
			unix.Close(rc.fd)
		}
		select {
		case <-sent:
		case <-clientErr:
		}
	}()
	go func() {
		runtime.LockOSThread()
		n := 0
		for ; n < cycles; n++ {
			select {
			case slots <- struct{}{}:
			case <-stop:
				sent <- n
				return
			}
			if err := resetClient(addr, tc); err != nil {
				clientErr <- err
				return
			}
		}
		sent <- n
	}()

	var st resetStats
	open = make(map[int]*resetRecv)
	start := time.Now()
	deadline := start.Add(budget)
	cqes := make([]ring.CQE, 256)
	clientDone := false
	var lastScan time.Time
	for !clientDone || len(open) > 0 {
		if !stopped && budget > 0 && time.Now().After(deadline) {
			close(stop)
			stopped = true
		}
		select {
		case err := <-clientErr:
			t.Fatalf("client: %v", err)
		case n := <-sent:
			st.cycles, clientDone = n, true
			sent <- n // for the deferred wait
		default:
		}
		if _, err := r.SubmitAndWaitTimeout(1, 5*time.Millisecond); err != nil && !errors.Is(err, unix.ETIME) && !errors.Is(err, unix.EINTR) {
			t.Fatalf("SubmitAndWaitTimeout: %v", err)
		}
		if r.Overflow() != 0 {
			t.Fatalf("CQ overflow: %d", r.Overflow())
		}
		n := r.PeekBatch(cqes)
		for i := range cqes[:n] {
			c := &cqes[i]
			switch {
			case c.UserData == udAccept:
				if c.Res < 0 {
					t.Fatalf("accept: %v", c.Err())
				}
				fd := int(c.Res)
				open[fd] = &resetRecv{fd: fd, armed: time.Now()}
				armRecv(fd)
				if !c.More() {
					armAccept()
				}
			case c.UserData&udCancel != 0:
				// 0, or ENOENT/EALREADY when the receive ended first.
			default:
				rc := open[int(c.UserData)]
				if rc == nil {
					t.Fatalf("completion for no armed receive: %+v", *c)
				}
				if _, bid, ok := br.Take(c); ok {
					br.Recycle(bid)
				}
				if c.More() {
					continue
				}
				errno := c.Err()
				switch {
				case rc.canceled && errors.Is(errno, unix.ECANCELED):
					if rc.closed {
						st.misses++
					} else {
						st.slow++
					}
				case !rc.canceled && (c.Res > 0 || errors.Is(errno, unix.ENOBUFS)):
					armRecv(rc.fd) // bytes in a single shot, or out of buffers
					continue
				}
				unix.Close(rc.fd)
				delete(open, rc.fd)
				<-slots
			}
		}
		r.CQAdvance(uint32(n))

		if now := time.Now(); now.Sub(lastScan) > 20*time.Millisecond {
			lastScan = now
			for _, rc := range open {
				switch age := now.Sub(rc.armed); {
				case !rc.canceled && age > 300*time.Millisecond:
					info, err := unix.GetsockoptTCPInfo(rc.fd, unix.IPPROTO_TCP, unix.TCP_INFO)
					if err != nil {
						t.Fatalf("TCP_INFO: %v", err)
					}
					rc.canceled = true
					rc.closed = info.State == tcpClose || info.State == tcpCloseWait
					s := sqe()
					s.PrepCancel64(uint64(rc.fd), 0)
					s.UserData = udCancel | uint64(rc.fd)
				case rc.canceled && age > 10*time.Second:
					t.Fatalf("fd %d: the receive answered neither the reset nor its cancel", rc.fd)
				}
			}
		}
	}
	st.took = time.Since(start)
	if st.cycles == 0 {
		t.Fatal("no cycle ran")
	}
	return st
}

const (
	tcpClose     = 7 // TCP_CLOSE
	tcpCloseWait = 8 // TCP_CLOSE_WAIT
)

// resetClient makes one connection to addr, writes 16 bytes if tc says
// so, and closes it with a reset or a FIN.
func resetClient(addr *unix.SockaddrInet4, tc resetCase) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for {
		err = unix.Connect(fd, addr)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if tc.data {
		if _, err := unix.Write(fd, []byte(strings.Repeat("x", 16))); err != nil {
			return fmt.Errorf("write: %w", err)
		}
	}
	if tc.reset {
		if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0}); err != nil {
			return err
		}
	}
	return nil
}
