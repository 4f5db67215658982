package main

import (
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/dlq/dlq/internal/bench"
)

// benchmark is one entry of the dispatch table: run gets the arguments after
// the benchmark's name and parses its own flags.
type benchmark struct {
	summary string
	run     func(args []string) error
}

// benchmarks is the dispatch table: one line per benchmark, kept sorted by name.
func benchmarks() map[string]benchmark {
	return map[string]benchmark{
		"api":            {"load 10M messages via COPY, measure p50/p99 of API pages, search, stats, status; ingest cost of the search index", bench.API},
		"cleanup":        {"delete 1M expired messages while ingest runs (throughput drop, delete rate); status and gauge reads at 10M rows", bench.Cleanup},
		"console":        {"sign in to the web console on the api benchmark's schema (10M messages) and measure p50/p99 and weight of each page", bench.Console},
		"ingest":         {"dead-letter N messages and measure end-to-end ingest msgs/s, CPU and RSS", bench.Ingest},
		"instances":      {"ingest and replay N messages with 1, 2 and 3 `dlq serve` processes on one database and queue", bench.Instances},
		"replay":         {"replay N stored 1 KiB messages with claims and confirms; msgs/s and CPU split", bench.Replay},
		"rounds-verdict": {"not a benchmark: the guard of make bench-ingest-rounds; exits 1 when HEAD's ingest ratio to raw drops past -threshold % of the baseline's", bench.RoundsVerdict},
	}
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	table := benchmarks()
	if len(args) == 0 {
		usage(os.Stderr, table)
		return 2
	}
	name := args[0]
	switch name {
	case "help", "-h", "--help":
		usage(os.Stdout, table)
		return 0
	}
	b, ok := table[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "dlq-bench: unknown benchmark %q\n\n", name)
		usage(os.Stderr, table)
		return 2
	}
	if err := b.run(args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "dlq-bench %s: %v\n", name, err)
		return 1
	}
	return 0
}

func usage(w io.Writer, table map[string]benchmark) {
	fmt.Fprintln(w, "usage: dlq-bench <benchmark> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "benchmarks:")
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, table[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `dlq-bench <benchmark> -h` for its flags.")
}
