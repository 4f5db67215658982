//go:build race

package api_test

// raceEnabled says the test binary was built with -race, which multiplies
// the cost of every byte encoded and parsed by about ten.
const raceEnabled = true
