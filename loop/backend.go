package loop

// Backend constructors, as package variables so tests can replace them
// (export_test.go): making io_uring unavailable exercises BackendAuto's
// fallback and BackendUring's error on any machine. Each returns a nil
// interface (not a typed nil pointer) on error.
var (
	newUring = func(cfg driverConfig) (driver, error) {
		d, err := newUringDriver(cfg)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	newEpoll = func(cfg driverConfig) (driver, error) {
		d, err := newEpollDriver(cfg)
		if err != nil {
			return nil, err
		}
		return d, nil
	}
)

// Both drivers implement driver on every system (stubs outside Linux).
var (
	_ driver = (*uringDriver)(nil)
	_ driver = (*epollDriver)(nil)
)
