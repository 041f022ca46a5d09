package loop

// uringDriver implements driver on every system (a stub outside Linux).
var _ driver = (*uringDriver)(nil)

// newUringBackend is newUringDriver with the driver interface as its
// result, for backend.go's newUring: on error the interface is nil, not a
// nil *uringDriver.
func newUringBackend(cfg driverConfig) (driver, error) {
	d, err := newUringDriver(cfg)
	if err != nil {
		return nil, err
	}
	return d, nil
}
