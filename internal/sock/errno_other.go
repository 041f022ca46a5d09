//go:build !linux

package sock

import (
	"errors"
	"fmt"
	"runtime"
)

// errNotSupported is what the helpers that need Linux return elsewhere.
var errNotSupported = fmt.Errorf("sock: not supported on %s: %w", runtime.GOOS, errors.ErrUnsupported)
