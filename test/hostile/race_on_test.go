//go:build race

package hostile

// raceOn: the race detector runs, whose shadow memory grows the resident
// set with the heap and whose allocations are larger.
const raceOn = true
