//go:build race

package web_test

// raceEnabled: timing figures mean nothing under the race detector.
const raceEnabled = true
