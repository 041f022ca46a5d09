package conn_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/loop"
)

// TestUnixPeerShutdown: Unix-socket clients each send 512 KiB, shut down
// their write side and read the echo to its end. The server must see every
// FIN: the echo ends (io.EOF at the client) only when the server has
// received all the bytes and then the end of the stream. On io_uring a
// multishot receive over AF_UNIX can miss the peer's shutdown (liburing
// issue 1549), so connections on Unix sockets receive with single shots;
// this test hangs into its deadline where they do not. The loop's ring has
// 64 buffers, so receives also run it dry and park.
func TestUnixPeerShutdown(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1, loop.WithBufferRing(64, 4096))
		h := ctNewServerHandler(t, func(e *ctEvents) { e.echo = true })
		s := ctListen(t, "unix", filepath.Join(t.TempDir(), "s"), g, h)

		rounds, clients, size := 8, 8, 512<<10
		if testing.Short() {
			rounds = 3
		}
		for round := range rounds {
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := unixEchoToEOF(s.Addr().String(), size); err != nil {
						errs <- fmt.Errorf("round %d client %d: %w", round, i, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		}
	})
}

// unixEchoToEOF sends size random bytes, shuts down its write side and
// reads the echo until the server closes; the echo must be the bytes sent.
func unixEchoToEOF(addr string, size int) error {
	nc, err := net.Dial("unix", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	msg := make([]byte, size)
	rand.Read(msg)
	werr := make(chan error, 1)
	go func() {
		_, err := nc.Write(msg)
		if err == nil {
			err = nc.(*net.UnixConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(nc) // to the server's close: it saw the FIN
	if err != nil {
		return fmt.Errorf("read after %d bytes: %w", len(got), err)
	}
	if err := <-werr; err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo of %d bytes differs from the %d sent", len(got), len(msg))
	}
	return nil
}
