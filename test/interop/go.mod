module github.com/ringloop/ringloop/test/interop

go 1.24.0

replace github.com/ringloop/ringloop => ../..

require (
	github.com/quic-go/quic-go v0.59.1
	github.com/ringloop/ringloop v0.0.0-00010101000000-000000000000
	golang.org/x/net v0.49.0
	google.golang.org/grpc v1.80.0
)

require (
	golang.org/x/crypto v0.47.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
	golang.org/x/text v0.33.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260120221211-b8f7ae30c516 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
