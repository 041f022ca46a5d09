package conn_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/loop"
)

func errorsIsClosed(err error) bool { return errors.Is(err, net.ErrClosed) }

// TestDialErrors: a refused connect keeps ECONNREFUSED (as *net.OpError);
// a canceled context and an expired deadline end the dial with errors
// matching ctx.Err(); no Handler method runs for a failed dial, and no fd
// is left behind.
func TestDialErrors(t *testing.T) {
	ctBackends(t, func(t *testing.T, b loop.Backend) {
		g := ctGroup(t, b, 1)
		h := ctNewEvents(t)
		bg := context.Background()

		t.Run("refused", func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close()
			_, err = conn.Dial(bg, g, "tcp", addr, h)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("Dial to a closed port: %v, want ECONNREFUSED", err)
			}
			var oe *net.OpError
			if !errors.As(err, &oe) || oe.Op != "dial" {
				t.Fatalf("%#v is not a dial *net.OpError", err)
			}
		})
		t.Run("canceled-before", func(t *testing.T) {
			ctx, cancel := context.WithCancel(bg)
			cancel()
			if _, err := conn.Dial(ctx, g, "tcp", "127.0.0.1:1", h); !errors.Is(err, context.Canceled) {
				t.Fatalf("Dial with a canceled ctx: %v", err)
			}
		})

		addr := ctHangingAddr(t)
		for _, tc := range []struct {
			name string
			want error
			ctx  func() (context.Context, context.CancelFunc)
		}{
			{"deadline", context.DeadlineExceeded, func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(bg, 100*time.Millisecond)
			}},
			{"connect-timeout", os.ErrDeadlineExceeded, func() (context.Context, context.CancelFunc) {
				return context.WithCancel(bg)
			}},
			{"canceled-during", context.Canceled, func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(bg)
				time.AfterFunc(100*time.Millisecond, cancel)
				return ctx, cancel
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx, cancel := tc.ctx()
				defer cancel()
				start := time.Now()
				var opts []conn.Option
				if tc.name == "connect-timeout" {
					opts = append(opts, conn.WithConnectTimeout(100*time.Millisecond))
				}
				c, err := conn.Dial(ctx, g, "tcp", addr, h, opts...)
				if err == nil {
					c.Close()
					t.Skip("the connect did not hang (the kernel accepted it)")
				}
				if !errors.Is(err, tc.want) {
					t.Fatalf("Dial: %v, want %v", err, tc.want)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Fatalf("Dial took %v", d)
				}
			})
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.opened != 0 || h.closes != 0 {
			t.Fatalf("failed dials called the handler: opened %d closes %d", h.opened, h.closes)
		}
	})
}

// TestInvalidOptions: bad options and networks are errors, never panics.
func TestInvalidOptions(t *testing.T) {
	g := ctGroup(t, loop.BackendEpoll, 1)
	h := conn.NopHandler{}
	for _, tc := range []struct {
		name    string
		network string
		opts    []conn.Option
		want    error
	}{
		{"water-marks", "tcp", []conn.Option{conn.WithWaterMarks(10, 5)}, conn.ErrInvalidOption},
		{"backlog", "tcp", []conn.Option{conn.WithBacklog(-1)}, conn.ErrInvalidOption},
		{"read-buffer", "tcp", []conn.Option{conn.WithReadBuffer(-1)}, conn.ErrInvalidOption},
		{"timeout", "tcp", []conn.Option{conn.WithReadTimeout(-time.Second)}, conn.ErrInvalidOption},
		{"idle", "tcp", []conn.Option{conn.WithIdleTimeout(-time.Second)}, conn.ErrInvalidOption},
		{"nil-option", "tcp", []conn.Option{nil}, conn.ErrInvalidOption},
		{"network", "udp", nil, conn.ErrUnknownNetwork},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := conn.Listen(context.Background(), g, tc.network, "127.0.0.1:0", h, tc.opts...); !errors.Is(err, tc.want) {
				t.Fatalf("Listen: %v, want %v", err, tc.want)
			}
			if _, err := conn.Dial(context.Background(), g, tc.network, "127.0.0.1:1", h, tc.opts...); !errors.Is(err, tc.want) {
				t.Fatalf("Dial: %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := conn.Listen(context.Background(), nil, "tcp", "127.0.0.1:0", h); err == nil {
		t.Fatal("Listen with a nil group succeeded")
	}
}

// TestDatagramNetworkOnStream: Listen, ListenNet, Dial and DialNet given a
// datagram network fail with a *net.OpError wrapping ErrUnknownNetwork (as
// package net's Listen and Dial report one) whose text names the function
// that takes the network.
func TestDatagramNetworkOnStream(t *testing.T) {
	g := ctGroup(t, loop.BackendEpoll, 1)
	bg := context.Background()
	calls := []struct {
		name, alt string
		call      func(network, address string) error
	}{
		{"Listen", "ListenPacket", func(n, a string) error {
			_, err := conn.Listen(bg, g, n, a, conn.NopHandler{})
			return err
		}},
		{"ListenNet", "ListenPacketNet", func(n, a string) error {
			_, err := conn.ListenNet(bg, g, n, a)
			return err
		}},
		{"Dial", "DialPacket", func(n, a string) error {
			_, err := conn.Dial(bg, g, n, a, conn.NopHandler{})
			return err
		}},
		{"DialNet", "DialPacketNet", func(n, a string) error {
			_, err := conn.DialNet(bg, g, n, a)
			return err
		}},
	}
	for _, c := range calls {
		for _, network := range []string{"udp", "udp4", "udp6", "unixgram"} {
			address := "127.0.0.1:0"
			switch network {
			case "udp6":
				address = "[::1]:0"
			case "unixgram":
				address = filepath.Join(t.TempDir(), "s")
			}
			err := c.call(network, address)
			var oe *net.OpError
			if !errors.Is(err, conn.ErrUnknownNetwork) || !errors.As(err, &oe) || oe.Net != network ||
				!strings.Contains(err.Error(), "use "+c.alt) {
				t.Errorf("%s(%q): %v, want a *net.OpError wrapping ErrUnknownNetwork that names %s", c.name, network, err, c.alt)
			}
		}
	}
}
