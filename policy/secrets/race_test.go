//go:build race

package secrets_test

// The race detector makes values escape that otherwise stay on the stack.
const raceDetector = true
