//go:build !linux

package sock

// SocketDrops is Linux only; elsewhere it returns an error matching
// errors.ErrUnsupported.
func SocketDrops(fd int) (uint32, error) { return 0, errNotSupported }
