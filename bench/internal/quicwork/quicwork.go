// Package quicwork is what the QUIC workload's server (cmd/quicserve) and
// load generator (cmd/quicload) agree on: the TLS and QUIC settings, the
// kinds of stream and the bytes a bulk stream carries.
//
// Every stream opens with one byte that says what it asks for:
//
//   - OpEcho: the rest of the stream, up to the client's end of it, is a
//     request of at most MaxRequest bytes; the server writes it back as the
//     response and closes its side.
//   - OpBulk: the server writes the bulk pattern (Bulk) on the stream until
//     the client stops reading.
//   - OpGSO: the server answers with one byte, '1' if quic-go sends this
//     connection's packets with generic segmentation offload (GSO) and '0'
//     if not, and closes its side.
//
// Serve is the server side of all three; cmd/quicserve gives it a socket.
package quicwork

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"time"

	"github.com/quic-go/quic-go"
)

// ALPN is the application protocol both sides name in the TLS handshake.
const ALPN = "ringloop-bench"

// The first byte of a stream.
const (
	OpEcho byte = 'R'
	OpBulk byte = 'B'
	OpGSO  byte = 'G'
)

// MaxRequest bounds a request of an OpEcho stream.
const MaxRequest = 64 << 10

// BulkChunk is the most the server writes and the client checks in one
// call on a bulk stream.
const BulkChunk = 64 << 10

// PatternLen is the period of the bulk pattern. It is prime, so no chunk
// size lines up with it: bytes lost, repeated or reordered on the way put
// the pattern out of step and fail the check.
const PatternLen = 65521

// bulk holds the pattern and, after it, its first BulkChunk bytes again,
// so that any chunk starting anywhere in the period is contiguous.
var bulk = func() []byte {
	b := make([]byte, PatternLen+BulkChunk)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range PatternLen {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x >> 32)
	}
	for i := PatternLen; i < len(b); i++ { // BulkChunk > PatternLen: the copy wraps more than once
		b[i] = b[i-PatternLen]
	}
	return b
}()

// Bulk returns the n ≤ BulkChunk bytes of the bulk stream at offset off.
// The slice is shared: do not modify it.
func Bulk(off uint64, n int) []byte {
	at := int(off % PatternLen)
	return bulk[at : at+n]
}

// Config is the QUIC configuration of both sides: quic-go's defaults, with
// room for more concurrent streams than the workloads open.
func Config() *quic.Config {
	return &quic.Config{MaxIncomingStreams: 4096, MaxIdleTimeout: 30 * time.Second}
}

// ServerTLS returns the server's TLS configuration with a certificate made
// up for this run (ECDSA P-256, self-signed, for 127.0.0.1 and localhost).
func ServerTLS() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "quicserve"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{ALPN}}, nil
}

// ClientTLS returns the load generator's TLS configuration. It does not
// verify the server's certificate, which the server makes up when it
// starts: the workload measures the connections, not their
// authentication, and only ever dials the server the harness started on
// this machine.
func ClientTLS() *tls.Config {
	return &tls.Config{NextProtos: []string{ALPN}, InsecureSkipVerify: true}
}
