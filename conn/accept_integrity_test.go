package conn_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// TestAcceptanceIntegrity: 256 concurrent clients stream writes of random sizes
// (1 B .. 256 KiB, 64 MiB in all) through the echo server and compare the
// SHA-256 of what they sent with that of what came back, per connection.
func TestAcceptanceIntegrity(t *testing.T) {
	const (
		clients  = 256
		maxChunk = 256 << 10
	)
	const total = 64 << 20 // fast enough under -race too: no scaling
	perClient := total / clients

	// Clients send slices of one shared random pool at random offsets: the
	// streams differ while the test holds 1 MiB instead of a buffer per client.
	pool := make([]byte, 1<<20+maxChunk)
	rand.NewChaCha8([32]byte{1}).Read(pool)

	accForEachBackend(t, func(t *testing.T, b loop.Backend) {
		testutil.Watchdog(t, 3*time.Minute)
		g := accGroup(t, b)
		srv := accListen(t, g, accEcho{})
		addr := srv.Addr().String()

		start := time.Now()
		var mismatches, failures atomic.Int64
		var wg sync.WaitGroup
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := accIntegrityClient(addr, i, perClient, pool, maxChunk); err != nil {
					if err == errAccMismatch {
						mismatches.Add(1)
					} else {
						failures.Add(1)
					}
					t.Errorf("client %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		t.Logf("%d clients, %d MiB echoed in %v (%.0f MiB/s), %d mismatches, %d failures",
			clients, clients*perClient>>20, took.Round(time.Millisecond),
			float64(clients*perClient)/(1<<20)/took.Seconds(), mismatches.Load(), failures.Load())
		if s := g.Stats().Total; s.StaleCompletions != 0 {
			t.Errorf("%d stale completions", s.StaleCompletions)
		}
	})
}

var errAccMismatch = fmt.Errorf("SHA-256 of the echo differs from that of the bytes sent")

// accIntegrityClient sends n bytes in writes of random sizes while a second
// goroutine reads the echo, and compares the digests.
func accIntegrityClient(addr string, id, n int, pool []byte, maxChunk int) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))

	sent := sha256.New()
	werr := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(uint64(id), 0x5eed))
		for left := n; left > 0; {
			size := min(1+rng.IntN(maxChunk), left)
			off := rng.IntN(len(pool) - size)
			chunk := pool[off : off+size]
			sent.Write(chunk)
			if _, err := c.Write(chunk); err != nil {
				werr <- err
				return
			}
			left -= size
		}
		werr <- nil
	}()
	got := sha256.New()
	if _, err := io.CopyN(got, c, int64(n)); err != nil {
		return fmt.Errorf("reading the echo: %w", err)
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	if !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		return errAccMismatch
	}
	return nil
}
