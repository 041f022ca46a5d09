package conn_test

import (
	"errors"
	"net"
)

func errorsIsClosed(err error) bool { return errors.Is(err, net.ErrClosed) }
