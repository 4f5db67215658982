package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/config"
)

func TestIngestInflightTTL(t *testing.T) {
	c, err := config.Load(config.Flags{}, env(nil))
	require.NoError(t, err)
	require.Equal(t, time.Hour, c.Cleanup.IngestInflightTTL.D(), "default")

	c, err = config.Load(config.Flags{}, env(map[string]string{"DLQ_INGEST_INFLIGHT_TTL": "6h"}))
	require.NoError(t, err)
	require.Equal(t, 6*time.Hour, c.Cleanup.IngestInflightTTL.D())

	c, err = config.Load(config.Flags{}, env(map[string]string{"DLQ_INGEST_INFLIGHT_TTL": "0"}))
	require.NoError(t, err)
	require.Zero(t, c.Cleanup.IngestInflightTTL, "0 keeps the rows")

	file := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(file, []byte("cleanup:\n  ingest_inflight_ttl: 2h\n"), 0o600))
	c, err = config.Load(config.Flags{ConfigFile: file}, env(nil))
	require.NoError(t, err)
	require.Equal(t, 2*time.Hour, c.Cleanup.IngestInflightTTL.D())

	for v, want := range map[string]string{
		"soon": `DLQ_INGEST_INFLIGHT_TTL="soon" is not a duration`,
		"30s":  "DLQ_INGEST_INFLIGHT_TTL 30s must be 0 (keep them) or at least 1m0s",
		"-1h":  "DLQ_INGEST_INFLIGHT_TTL -1h0m0s must be 0 (keep them) or at least 1m0s",
	} {
		_, err := config.Load(config.Flags{}, env(map[string]string{"DLQ_INGEST_INFLIGHT_TTL": v}))
		require.Error(t, err, v)
		require.Contains(t, err.Error(), want)
	}
}
