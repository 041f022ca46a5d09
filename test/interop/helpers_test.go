package interop_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
	"github.com/ringloop/ringloop/ring"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// logger is the groups' logger: warnings and errors to stderr.
var logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// forBackends runs f once per backend as "backend=uring" and
// "backend=epoll"; uring is skipped where io_uring is refused. Each run
// has a watchdog of d.
func forBackends(t *testing.T, d time.Duration, f func(t *testing.T, b loop.Backend)) {
	t.Helper()
	for _, b := range []loop.Backend{loop.BackendUring, loop.BackendEpoll} {
		t.Run("backend="+b.String(), func(t *testing.T) {
			if b == loop.BackendUring {
				testutil.SkipIfNoUring(t)
			}
			testutil.Watchdog(t, d)
			f(t, b)
		})
	}
}

// newGroup creates a group of n loops on backend b, shut down when the
// test ends.
func newGroup(tb testing.TB, b loop.Backend, n int) *loop.Group {
	tb.Helper()
	g, err := loop.NewGroup(loop.WithBackend(b), loop.WithLoops(n), loop.WithLogger(logger))
	if err != nil {
		if b == loop.BackendUring && errors.Is(err, ring.ErrNotSupported) {
			tb.Skipf("io_uring unavailable: %v", err)
		}
		tb.Fatalf("NewGroup: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			tb.Errorf("group Shutdown: %v", err)
		}
	})
	return g
}

// testCert is a self-signed ECDSA certificate for localhost and
// 127.0.0.1, made once per test binary.
var testCert = sync.OnceValues(func() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ringloop interop test"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
})

// tlsConfigs returns a server and a client TLS configuration that trust
// each other through testCert, both offering the ALPN protocol proto.
func tlsConfigs(tb testing.TB, proto string) (server, client *tls.Config) {
	tb.Helper()
	cert, err := testCert()
	if err != nil {
		tb.Fatalf("test certificate: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	server = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{proto}}
	client = &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{proto}}
	return server, client
}

// pattern fills p with the bytes at offsets off.. of the stream that seed
// names: a multiplicative hash of the offset, so that a byte lost,
// repeated or moved, or one from another stream, shows.
func pattern(p []byte, seed uint32, off int64) {
	for i := range p {
		p[i] = patternByte(seed, off+int64(i))
	}
}

func patternByte(seed uint32, off int64) byte {
	v := uint32(off)*2654435761 + uint32(off>>32)*40503 + seed*2246822519
	return byte(v>>24) ^ byte(v>>8)
}

// checkPattern returns the offset of the first byte of p that differs
// from pattern(seed, off), or -1.
func checkPattern(p []byte, seed uint32, off int64) int64 {
	for i, c := range p {
		if c != patternByte(seed, off+int64(i)) {
			return off + int64(i)
		}
	}
	return -1
}
