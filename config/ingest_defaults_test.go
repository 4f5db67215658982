package config_test

import (
	"testing"
	"time"

	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/consumer"
)

// dlq serve passes config's ingest defaults to the consumer, which has its
// own for a Config built without them (tests, the benchmark): the two must
// be one set of values.
func TestIngestDefaultsAreTheConsumers(t *testing.T) {
	in := config.Default().Ingest
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"consumers", int64(in.Consumers), consumer.ConsumersDefault},
		{"prefetch", int64(in.Prefetch), consumer.PrefetchDefault},
		{"batch_size", int64(in.BatchSize), consumer.BatchSizeDefault},
		{"batch_bytes", int64(in.BatchBytes), consumer.BatchBytesDefault},
		{"linger", int64(in.Linger.D()), int64(consumer.LingerDefault / time.Nanosecond)},
	} {
		if c.got != c.want {
			t.Errorf("ingest.%s: config.Default %d, consumer's default %d", c.name, c.got, c.want)
		}
	}
}
