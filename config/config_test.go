package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/config"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := config.Load(config.Flags{}, env(nil))
	require.NoError(t, err)
	require.Equal(t, "amqp://guest:guest@127.0.0.1:5672/", c.AMQPURL)
	require.Equal(t, "127.0.0.1:8080", c.HTTPAddr)
	require.Equal(t, "dlx", c.Exchange)
	require.Equal(t, []string{"dlq"}, c.Queues)
	require.Equal(t, "dlq.control", c.ControlQueue)
	require.Contains(t, c.DatabaseURL, "/dlq")
}

// DLQ_AMQP_URL takes one URL, as it always did, or a RabbitMQ cluster's
// nodes separated by commas; the value is kept as given, for the broker
// connection to split.
func TestAMQPURLList(t *testing.T) {
	const nodes = "amqp://u:p,w@rabbit1:5672/, amqp://u:p,w@rabbit2:5672/"
	c, err := config.Load(config.Flags{}, env(map[string]string{"DLQ_AMQP_URL": nodes}))
	require.NoError(t, err)
	require.Equal(t, nodes, c.AMQPURL)
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "dlq.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
exchange: from-file
queues: [a, b]
http_addr: 127.0.0.1:9000
ingest:
  batch_size: 100
  linger: 10ms
topology:
  source_queues:
    - name: orders
      delivery_limit: 5
      message_ttl: 1m
`), 0o600))
	c, err := config.Load(config.Flags{ConfigFile: file, HTTPAddr: "127.0.0.1:9999"}, env(map[string]string{
		"DLQ_EXCHANGE": "from-env", "DLQ_QUEUES": " x , y ,", "DLQ_ADMIN_TOKEN": "s3cret",
	}))
	require.NoError(t, err)
	require.Equal(t, "from-env", c.Exchange, "env beats file")
	require.Equal(t, []string{"x", "y"}, c.Queues)
	require.Equal(t, "127.0.0.1:9999", c.HTTPAddr, "flag beats file")
	require.Equal(t, 100, c.Ingest.BatchSize)
	require.Equal(t, 10*time.Millisecond, c.Ingest.Linger.D())
	require.Equal(t, "s3cret", c.AdminToken)
	require.Len(t, c.Topology.SourceQueues, 1)
	require.Equal(t, time.Minute, c.Topology.SourceQueues[0].MessageTTL)
}

func TestErrorsNameTheSetting(t *testing.T) {
	cases := map[string]struct {
		env  map[string]string
		file string
		want string
	}{
		"bad amqp url":      {env: map[string]string{"DLQ_AMQP_URL": "http://x"}, want: "DLQ_AMQP_URL"},
		"prefetch not int":  {env: map[string]string{"DLQ_PREFETCH": "lots"}, want: `DLQ_PREFETCH="lots" is not a whole number`},
		"batch > prefetch":  {env: map[string]string{"DLQ_BATCH_SIZE": "5000"}, want: "must not exceed ingest.prefetch"},
		"bad linger":        {env: map[string]string{"DLQ_BATCH_LINGER": "soon"}, want: "DLQ_BATCH_LINGER"},
		"empty queues":      {env: map[string]string{"DLQ_QUEUES": " , "}, want: "DLQ_QUEUES must name at least one queue"},
		"control in queues": {env: map[string]string{"DLQ_QUEUES": "dlq,dlq.control"}, want: "also listed in queues"},
		"bad log level":     {env: map[string]string{"DLQ_LOG_LEVEL": "loud"}, want: "DLQ_LOG_LEVEL"},
		"unknown yaml key":  {file: "exchnage: x\n", want: "exchnage"},
		"bad yaml duration": {file: "ingest:\n  linger: fast\n", want: "not a duration"},
		"self dlq":          {file: "topology:\n  source_queues:\n    - name: dlq\n", want: "its own dead-letter queue"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := config.Flags{}
			if tc.file != "" {
				f.ConfigFile = filepath.Join(t.TempDir(), "c.yaml")
				require.NoError(t, os.WriteFile(f.ConfigFile, []byte(tc.file), 0o600))
			}
			_, err := config.Load(f, env(tc.env))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
