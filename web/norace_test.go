//go:build !race

package web_test

const raceEnabled = false
