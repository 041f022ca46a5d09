//go:build !race

package conn_test

// accRace reports a -race build: the acceptance tests scale their byte
// counts down (RINGLOOP_FULL=1 restores the full sizes; CI runs them so).
const accRace = false
