//go:build !race

package integration

const raceSlowdown = 1
