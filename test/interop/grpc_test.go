package interop_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ringloop/ringloop/conn"
	"github.com/ringloop/ringloop/internal/testutil"
	"github.com/ringloop/ringloop/loop"
)

// rawCodec carries *[]byte messages as they are. The echo service below
// is called with content subtype "raw", so it needs no generated code;
// the health service keeps the proto codec.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "raw" }

func init() { encoding.RegisterCodec(rawCodec{}) }

// echoMethod is the bidirectional streaming method of echoService.
const echoMethod = "/ringloop.interop.Echo/Echo"

// echoService echoes every message of a bidirectional stream back, until
// the client closes its side.
var echoService = grpc.ServiceDesc{
	ServiceName: "ringloop.interop.Echo",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Echo",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			for {
				var msg []byte
				if err := stream.RecvMsg(&msg); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				if err := stream.SendMsg(&msg); err != nil {
					return err
				}
			}
		},
	}},
}

// TestGRPCServeEndsWithServer: grpc.Serve on a conn.NetListener serves
// real gRPC calls (unary Check and server-streaming Watch of grpc's health
// service, and concurrent bidirectional streams of raw messages, every
// byte checked), and returns, as it does on a net.Listener whose socket
// closes, with an error wrapping net.ErrClosed when the server under the
// listener stops, whichever way: Group.Shutdown, Server().Close() or
// Server().Shutdown(ctx). Server().Close() leaves the accepted connection
// open, as net.Listener.Close does: a later call goes over it. Nothing
// is left behind once the gRPC server and client are stopped.
func TestGRPCServeEndsWithServer(t *testing.T) {
	stops := []struct {
		name      string
		stop      func(g *loop.Group, ln *conn.NetListener) error
		connLives bool // the client's connection outlives the stop
	}{
		{"Group.Shutdown", func(g *loop.Group, _ *conn.NetListener) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return g.Shutdown(ctx)
		}, false},
		{"Server.Close", func(_ *loop.Group, ln *conn.NetListener) error { return ln.Server().Close() }, true},
		{"Server.Shutdown", func(_ *loop.Group, ln *conn.NetListener) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return ln.Server().Shutdown(ctx)
		}, false},
	}
	for _, st := range stops {
		t.Run(st.name, func(t *testing.T) {
			forBackends(t, 60*time.Second, func(t *testing.T, b loop.Backend) {
				testutil.CheckLeaks(t) // first, so its check runs after every other cleanup
				g := newGroup(t, b, 2)
				ln, err := conn.ListenNet(context.Background(), g, "tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })

				srv := grpc.NewServer()
				hs := health.NewServer()
				healthpb.RegisterHealthServer(srv, hs)
				srv.RegisterService(&echoService, struct{}{})
				served := make(chan error, 1)
				go func() { served <- srv.Serve(ln) }()
				t.Cleanup(srv.Stop)

				// A client on package net, apart from the group.
				cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
					grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cc.Close() })
				grpcCalls(t, cc, hs)
				if n := ln.Server().Conns(); n != 1 {
					t.Errorf("the server has %d connections after the calls, want the client's 1", n)
				}

				if err := st.stop(g, ln); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				select {
				case err := <-served:
					var oe *net.OpError
					if !errors.Is(err, net.ErrClosed) || !errors.As(err, &oe) || oe.Op != "accept" {
						t.Errorf("grpc.Serve after %s returned %v, want an accept *net.OpError wrapping net.ErrClosed", st.name, err)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("grpc.Serve still running 5s after %s returned", st.name)
				}
				if st.connLives {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
					if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
						t.Errorf("Check after %s over the kept connection: %v, %v; want SERVING", st.name, resp.GetStatus(), err)
					}
				} else {
					// The client's connection was closed and nothing
					// listens any more: a call fails, and does not hang.
					ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
					defer cancel()
					_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
					if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
						t.Errorf("Check after %s: %v, want Unavailable or DeadlineExceeded", st.name, err)
					}
				}

				srv.Stop()
				cc.Close()
			})
		})
	}
}

// grpcCalls makes the calls of TestGRPCServeEndsWithServer over cc: a
// unary Check, a server-streaming Watch that sees two status changes, and
// 8 concurrent bidirectional echo streams of 24 messages each (1 byte to
// 256 KiB, past HTTP/2's initial flow-control window).
func grpcCalls(t *testing.T, cc *grpc.ClientConn, hs *health.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := healthpb.NewHealthClient(cc)

	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Check: %v, want SERVING", resp.GetStatus())
	}

	const svc = "ringloop.interop.Echo"
	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: svc})
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	for i, want := range []healthpb.HealthCheckResponse_ServingStatus{
		healthpb.HealthCheckResponse_NOT_SERVING,
		healthpb.HealthCheckResponse_SERVING,
		healthpb.HealthCheckResponse_NOT_SERVING,
	} {
		got, err := watch.Recv()
		if err != nil {
			t.Fatalf("Watch update %d: %v", i, err)
		}
		if got.GetStatus() != want {
			t.Fatalf("Watch update %d: %v, want %v", i, got.GetStatus(), want)
		}
		// The next change, sent once this update arrived (the health
		// server keeps only the latest status of a slow watcher).
		if i == 0 {
			hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
		} else if i == 1 {
			hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
		}
	}

	const streams, msgs = 8, 24
	errs := make(chan error, streams)
	var wg sync.WaitGroup
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- echoStream(ctx, cc, uint32(s), msgs)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// echoStream sends msgs messages of growing sizes on one bidirectional
// echo stream, each with the stream's own pattern, and checks every echo.
func echoStream(ctx context.Context, cc *grpc.ClientConn, seed uint32, msgs int) error {
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	stream, err := cc.NewStream(ctx, desc, echoMethod, grpc.CallContentSubtype("raw"))
	if err != nil {
		return fmt.Errorf("stream %d: NewStream: %v", seed, err)
	}
	var off int64
	for i := range msgs {
		size := 1 << (i % 19) // 1 B .. 256 KiB
		msg := make([]byte, size)
		pattern(msg, seed, off)
		if err := stream.SendMsg(&msg); err != nil {
			return fmt.Errorf("stream %d: send %d: %v", seed, i, err)
		}
		var got []byte
		if err := stream.RecvMsg(&got); err != nil {
			return fmt.Errorf("stream %d: receive %d: %v", seed, i, err)
		}
		if !bytes.Equal(got, msg) {
			return fmt.Errorf("stream %d: echo %d: %d bytes, want %d, first difference at stream offset %d",
				seed, i, len(got), len(msg), checkPattern(got, seed, off))
		}
		off += int64(size)
	}
	if err := stream.CloseSend(); err != nil {
		return fmt.Errorf("stream %d: CloseSend: %v", seed, err)
	}
	var extra []byte
	if err := stream.RecvMsg(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("stream %d: after CloseSend: %v, want io.EOF", seed, err)
	}
	return nil
}
