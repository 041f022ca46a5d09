module github.com/ringloop/ringloop/bench

go 1.24.0

replace github.com/ringloop/ringloop => ../

require (
	github.com/panjf2000/gnet/v2 v2.5.0
	github.com/quic-go/quic-go v0.59.1
	github.com/ringloop/ringloop v0.0.0-00010101000000-000000000000
	github.com/valyala/fasthttp v1.69.0
	golang.org/x/sys v0.40.0
)

require (
	github.com/andybalholm/brotli v1.2.0 // indirect
	github.com/klauspost/compress v1.18.2 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	go.uber.org/atomic v1.7.0 // indirect
	go.uber.org/multierr v1.6.0 // indirect
	go.uber.org/zap v1.21.0 // indirect
	golang.org/x/crypto v0.46.0 // indirect
	golang.org/x/net v0.48.0 // indirect
	golang.org/x/sync v0.16.0 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
)
