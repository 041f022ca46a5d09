//go:build !race

package hostile

const raceOn = false
