package main

import "errors"

// benchIngest is being written; see docs/BENCHMARKS.md once it lands.
func benchIngest(args []string) error {
	return errors.New("ingest benchmark: not implemented yet")
}
