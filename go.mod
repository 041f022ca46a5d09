module github.com/ringloop/ringloop

go 1.24.0

require (
	github.com/pawelgaczynski/giouring v0.0.0-20230826085535-69588b89acb9
	golang.org/x/net v0.47.0
	golang.org/x/sys v0.40.0
)

require github.com/stretchr/testify v1.11.1 // indirect
