package cleanup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// TestZeroKeepsForever: an age of 0 from the configuration keeps every
// kind of record forever, through Config's defaults and the job's own
// check; an age left out of a Config takes its default instead.
func TestZeroKeepsForever(t *testing.T) {
	t.Parallel()
	require.Equal(t, KeepForever, ConfiguredTTL(0))
	require.Equal(t, time.Hour, ConfiguredTTL(time.Hour))

	configured := Config{
		Retention:         map[string]time.Duration{store.StatusReplayed: 0, store.StatusAcknowledged: time.Hour},
		ControlCommandTTL: ConfiguredTTL(0), ReplayTaskTTL: ConfiguredTTL(0), JobRunTTL: ConfiguredTTL(0),
		AuditTTL: ConfiguredTTL(0), IngestInflightTTL: ConfiguredTTL(0),
	}
	configured.setDefaults()
	require.True(t, keptForever(configured.Retention[store.StatusReplayed]))
	require.False(t, keptForever(configured.Retention[store.StatusAcknowledged]))
	for _, e := range expiries(configured, time.Now) {
		if e.Name == "queue_activity" {
			continue // not configurable: only the last day is ever read
		}
		require.True(t, keptForever(e.TTL), "%s configured 0 is deleted after %s", e.Name, e.TTL)
	}

	var unset Config
	unset.setDefaults()
	require.False(t, keptForever(unset.Retention[store.StatusReplayed]))
	for _, e := range expiries(unset, time.Now) {
		// Audit rows are the one kind kept forever by default.
		require.Equal(t, e.Name == "audit_log", keptForever(e.TTL), "%s left out: TTL %s", e.Name, e.TTL)
	}
}
