//go:build !race

package secrets_test

const raceDetector = false
