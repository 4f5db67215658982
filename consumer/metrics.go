package consumer

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/internal/promreg"
	"github.com/dlq/dlq/store"
)

type metrics struct {
	ingested    *prometheus.CounterVec
	duplicates  prometheus.Counter
	batch       prometheus.Histogram
	batchSize   prometheus.Histogram
	writeErrors prometheus.Counter
	dataErrors  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		ingested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlq_messages_ingested_total",
			Help: "Dead messages stored (new rows, and replayed messages that died again), by dlq queue, source queue and reason.",
		}, []string{"queue", "source_queue", "reason"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlq_messages_duplicate_total",
			Help: "Redeliveries recognised as already stored; nothing was written for them.",
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dlq_ingest_batch_seconds",
			Help:    "Time to write and commit one ingest batch.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dlq_ingest_batch_messages",
			Help:    "Messages per committed ingest batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12),
		}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlq_ingest_write_errors_total",
			Help: "Failed attempts to write an ingest batch (the batch is retried).",
		}),
		dataErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlq_ingest_data_errors_total",
			Help: "Batches PostgreSQL refused for their data; they are split and the offending message stored raw.",
		}),
	}
	var errs [6]error
	m.ingested, errs[0] = promreg.Register(reg, m.ingested)
	m.duplicates, errs[1] = promreg.Register(reg, m.duplicates)
	m.batch, errs[2] = promreg.Register(reg, m.batch)
	m.batchSize, errs[3] = promreg.Register(reg, m.batchSize)
	m.writeErrors, errs[4] = promreg.Register(reg, m.writeErrors)
	m.dataErrors, errs[5] = promreg.Register(reg, m.dataErrors)
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("consumer: register metrics: %w", err)
	}
	return m, nil
}

type ingestKey struct{ source, reason string }

func (m *metrics) observe(queue string, msgs []store.NewMessage, res store.IngestResult, d time.Duration) {
	m.batch.Observe(d.Seconds())
	m.batchSize.Observe(float64(len(msgs)))
	if res.Duplicates > 0 {
		m.duplicates.Add(float64(res.Duplicates))
	}
	counts := make(map[ingestKey]int, 4)
	for i := range msgs {
		if res.Outcomes != nil && res.Outcomes[i] == store.OutcomeDuplicate {
			continue
		}
		counts[ingestKey{msgs[i].SourceQueue, msgs[i].Reason}]++
	}
	for k, n := range counts {
		m.ingested.WithLabelValues(queue, k.source, k.reason).Add(float64(n))
	}
}

// reconstructResult rebuilds the outcomes of a batch whose commit was only
// learnt afterwards (CommittedRows), from the number of new rows it wrote,
// so that its duplicates are counted as duplicates, not as stored. The
// store's rules decide most messages: a first delivery without x-dlq-id is
// always a new row, and a replayed message (x-dlq-id) is stored either way,
// returned or new. Only redeliveries are either duplicates or new rows:
// the new rows left over after the others are theirs. (A replayed message
// whose record was gone is taken as returned; it is stored all the same.)
func reconstructResult(msgs []store.NewMessage, rows int) store.IngestResult {
	res := store.IngestResult{Outcomes: make([]store.Outcome, len(msgs))}
	for i := range msgs {
		if msgs[i].DLQID == 0 && !msgs[i].Redelivered {
			res.Outcomes[i] = store.OutcomeInserted
			rows--
		}
	}
	for i := range msgs {
		switch {
		case res.Outcomes[i] != 0:
		case msgs[i].DLQID > 0:
			res.Outcomes[i] = store.OutcomeReturned
		case rows > 0:
			res.Outcomes[i] = store.OutcomeInserted
			rows--
		default:
			res.Outcomes[i] = store.OutcomeDuplicate
		}
	}
	for _, o := range res.Outcomes {
		switch o {
		case store.OutcomeInserted:
			res.Inserted++
		case store.OutcomeDuplicate:
			res.Duplicates++
		case store.OutcomeReturned:
			res.Returned++
		}
	}
	return res
}
