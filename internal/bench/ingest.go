package bench

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/internal/gctune"
)

// ingestOptions are the flags of `dlq-bench ingest`.
type ingestOptions struct {
	n         int
	sizes     []int
	runs      int
	queueType string
	mode      string
	// dlqBin is the dlq binary process mode runs (empty: built from this tree).
	dlqBin string
	// deadLetter is how the prefill makes dead letters: direct (published
	// to the exchange with the headers RabbitMQ would write), limits (the
	// same, shaped as the raw pipeline's), reject or ttl (RabbitMQ
	// dead-letters them from a source queue).
	deadLetter string
	amqpURL    string
	pgURL      string
	cpuProfile string
	memProfile string
	// pgProfile is where perf's samples of each drain go (startPerf).
	pgProfile string
	out       string
	keep      bool
	ingest    config.Ingest
	// withoutIndexes are dropped after migrating: a diagnostic to price an
	// index at ingest, never for recorded figures.
	withoutIndexes []string
	// textBodies makes the bodies words (text search reads them) instead
	// of random bytes (binary: never tokenised).
	textBodies bool
	// encrypt lists the encryption settings measured (-encrypt).
	encrypt []bool
	cpu     cpuMeter
}

// Ingest runs `dlq-bench ingest`: it dead-letters N messages and measures
// dlq's ingest from the first delivery to the last commit (msgs/s, CPU of
// dlq, RabbitMQ and PostgreSQL, and in process mode dlq's peak RSS).
func Ingest(args []string) error {
	o, err := parseIngestFlags(args)
	if err != nil {
		return err
	}
	// The in-process consumer runs with the collector settings of dlq serve.
	gctune.Apply(slog.New(slog.DiscardHandler))

	bin := o.dlqBin
	if o.mode == "process" && bin == "" {
		b, clean, err := buildDlq()
		if err != nil {
			return err
		}
		defer clean()
		bin = b
	}
	o.cpu = newCPUMeter()
	fmt.Printf("ingest benchmark: n=%d sizes=%v runs=%d mode=%s queue=%s dead-letter=%s consumers=%d prefetch=%d batch=%d linger=%s\n",
		o.n, o.sizes, o.runs, o.mode, o.queueType, o.deadLetter, o.ingest.Consumers, o.ingest.Prefetch, o.ingest.BatchSize, o.ingest.Linger.D())

	var all []ingestResult
	for _, size := range o.sizes {
		off, on := map[int]float64{}, map[int]float64{}
		for run := 1; run <= o.runs; run++ {
			for _, enc := range runOrder(o.encrypt, run) {
				r, err := ingestRun(o, bin, size, run, enc)
				if err != nil {
					return fmt.Errorf("size %d run %d: %w", size, run, err)
				}
				all = append(all, r)
				printResult(r)
				if enc {
					on[run] = r.MsgsSec
				} else {
					off[run] = r.MsgsSec
				}
				if o.out != "" {
					if err := appendJSON(o.out, r); err != nil {
						return err
					}
				}
			}
		}
		onOffRatio(fmt.Sprintf("ingest %d B", size), off, on)
	}
	printIngestSummary(all)
	return nil
}

// parseIngestFlags reads the flags of `dlq-bench ingest` and checks them.
func parseIngestFlags(args []string) (ingestOptions, error) {
	def := config.Default()
	o := ingestOptions{ingest: def.Ingest}
	fs := flag.NewFlagSet("dlq-bench ingest", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 200000, "dead letters per run")
	sizes := fs.String("size", "1024,16384", "body sizes in bytes, comma list (one set of runs each)")
	fs.IntVar(&o.runs, "runs", 3, "runs per size; the summary shows the median")
	fs.StringVar(&o.queueType, "queue-type", "quorum", "type of dlq's queue: quorum (what dlq declares) or classic")
	fs.StringVar(&o.deadLetter, "dead-letter", "direct", "how the (untimed) prefill makes dead letters: direct (published to the exchange with the death headers RabbitMQ writes), limits (as direct, but the very dead letters bench-limits' pipeline drains: one x-death entry, twenty source queues, fewer headers and properties), reject (RabbitMQ dead-letters them from a source queue whose consumer rejects them) or ttl (they expire in a source queue with a message TTL of 0)")
	fs.StringVar(&o.mode, "mode", "inproc", "inproc: consumer.New in this process; process: a `dlq serve` subprocess (measures its peak RSS)")
	fs.StringVar(&o.amqpURL, "amqp", cmp.Or(os.Getenv("DLQ_AMQP_URL"), config.AMQPURLDefault), "RabbitMQ URL")
	fs.StringVar(&o.pgURL, "pg", cmp.Or(os.Getenv("BENCH_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/bench?sslmode=disable"),
		"PostgreSQL database; each run gets a fresh schema in it")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of each timed drain (inproc mode) to this file; runs after the first get -<size>-<run> before the extension")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile of each timed drain (inproc mode) to this file, and the allocations before it to <file>.base (compare with go tool pprof -base); names as -cpuprofile; the collection before the first write adds a few ms to the timed drain")
	fs.StringVar(&o.pgProfile, "pgprofile", "", "sample the whole machine with Linux perf during each timed drain (inproc mode) into this file, for PostgreSQL's side (scripts/bench-pg-stages.py); names as -cpuprofile")
	fs.StringVar(&o.dlqBin, "dlq-bin", "", "process mode: run this dlq binary instead of building one from this source tree (to compare builds; it runs with --no-migrate on a schema this tree migrates)")
	fs.StringVar(&o.out, "out", "", "append each result as a JSON line to this file")
	fs.BoolVar(&o.keep, "keep", false, "keep each run's schema, exchange and queue")
	fs.IntVar(&o.ingest.Consumers, "consumers", def.Ingest.Consumers, "consumers per queue (default: dlq's default)")
	fs.IntVar(&o.ingest.Prefetch, "prefetch", def.Ingest.Prefetch, "prefetch per consumer (default: dlq's default)")
	fs.IntVar(&o.ingest.BatchSize, "batch", def.Ingest.BatchSize, "messages per transaction (default: dlq's default)")
	encrypt := fs.String("encrypt", "off", "encryption at rest: off, on (a random key, every header sealed), or both (interleaved in each run)")
	fs.BoolVar(&o.ingest.TextSearch, "text-search", def.Ingest.TextSearch, "text search on: ingest queues its rows and the text indexer runs beside it at its default pacing, as in dlq serve (default: dlq's default)")
	fs.BoolVar(&o.textBodies, "text", false, "bodies of words (which text search indexes) instead of random bytes")
	without := fs.String("without-index", "", "diagnostic: drop these dead_messages indexes (comma list) before the drain, to price them; never for recorded figures")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var err error
	if o.encrypt, err = encryptSettings(*encrypt); err != nil {
		return o, err
	}
	for _, ix := range strings.Split(*without, ",") {
		if ix = strings.TrimSpace(ix); ix != "" {
			o.withoutIndexes = append(o.withoutIndexes, ix)
		}
	}
	for _, s := range strings.Split(*sizes, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || v < 16 {
			return o, fmt.Errorf("-size: %q is not a body size of at least 16 bytes", s)
		}
		o.sizes = append(o.sizes, v)
	}
	switch {
	case o.n <= 0:
		return o, fmt.Errorf("-n must be positive, got %d", o.n)
	case o.runs <= 0:
		return o, fmt.Errorf("-runs must be positive, got %d", o.runs)
	case o.mode != "inproc" && o.mode != "process":
		return o, fmt.Errorf("-mode must be inproc or process, got %q", o.mode)
	case o.queueType != "quorum" && o.queueType != "classic":
		return o, fmt.Errorf("-queue-type must be quorum or classic, got %q", o.queueType)
	case o.deadLetter != "direct" && o.deadLetter != "limits" && o.deadLetter != "reject" && o.deadLetter != "ttl":
		return o, fmt.Errorf("-dead-letter must be direct, limits, reject or ttl, got %q", o.deadLetter)
	case o.deadLetter == "limits" && o.textBodies:
		return o, errors.New("-dead-letter limits publishes the raw pipeline's binary bodies: drop -text")
	case o.dlqBin != "" && o.mode != "process":
		return o, errors.New("-dlq-bin needs -mode process")
	case (o.cpuProfile != "" || o.memProfile != "" || o.pgProfile != "") && o.mode != "inproc":
		return o, errors.New("-cpuprofile, -memprofile and -pgprofile need -mode inproc (the consumer must run in this process)")
	}
	return o, nil
}
