//go:build !race

package scenario

// raceDetector tells whether the tests run under the race detector.
const raceDetector = false
