package loop

// Backend constructors, as package variables so tests can replace them
// (export_test.go): making io_uring unavailable exercises BackendAuto's
// fallback and BackendUring's error on any machine.
var (
	newUring = func(cfg driverConfig) (driver, error) { return nil, errNoDriver("uring") }
	newEpoll = func(cfg driverConfig) (driver, error) { return nil, errNoDriver("epoll") }
)

func errNoDriver(name string) error { return invalidOption("backend %s is not built yet", name) }
