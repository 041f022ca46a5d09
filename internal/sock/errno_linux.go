package sock

import "golang.org/x/sys/unix"

// errnoBoxes holds every errno below 256 already converted to an error, so
// that returning one never allocates.
var errnoBoxes = func() (t [256]error) {
	for i := range t {
		t[i] = unix.Errno(i)
	}
	return t
}()

// errnoErr returns e as an error without allocating for common values.
func errnoErr(e unix.Errno) error {
	if e < unix.Errno(len(errnoBoxes)) {
		return errnoBoxes[e]
	}
	return e
}
