//go:build race

package main

// raceEnabled says the test binary was built with -race, so the dlq binary
// the tests build matches it (and reuses its compiled packages).
const raceEnabled = true
