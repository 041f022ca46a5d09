package conn_test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

// crypto/tls over the adapters: a TLS echo server on ListenNet and a TLS
// client on DialNet, with a self-signed certificate made on the spot.
func ExampleListenNet_tls() {
	cert, roots, err := selfSigned("localhost")
	if err != nil {
		fmt.Println(err)
		return
	}
	// Client and server in one process: loops on the shared thread.
	g, err := loop.NewGroup(loop.WithSharedThread(true))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Shutdown(context.Background())
	ctx := context.Background()

	ln, err := conn.ListenNet(ctx, g, "tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
	defer tln.Close()
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return // the listener was closed
			}
			go func() {
				defer c.Close()
				io.Copy(c, c) // echo until the client closes
			}()
		}
	}()

	raw, err := conn.DialNet(ctx, g, "tcp", ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	c := tls.Client(raw, &tls.Config{RootCAs: roots, ServerName: "localhost"})
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintln(c, "hello over TLS")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(line)
	fmt.Println("TLS 1.3:", c.ConnectionState().Version == tls.VersionTLS13)
	// Output:
	// hello over TLS
	// TLS 1.3: true
}

// selfSigned makes a certificate for host, valid for an hour, and a pool
// that trusts it.
func selfSigned(host string) (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, roots, nil
}
