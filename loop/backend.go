package loop

// Backend constructors, as package variables so tests can replace them
// (export_test.go): making io_uring unavailable exercises BackendAuto's
// fallback and BackendUring's error on any machine. Each returns a nil
// interface (not a typed nil pointer) on error.
var (
	newUring = newUringBackend
	newEpoll = newEpollBackend
)

func newEpollBackend(cfg driverConfig) (driver, error) {
	d, err := newEpollDriver(cfg)
	if err != nil {
		return nil, err
	}
	return d, nil
}
