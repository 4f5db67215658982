package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/config"
)

func TestReplaySection(t *testing.T) {
	c, err := config.Load(config.Flags{}, func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, 5, c.Replay.MaxReplays)
	require.Equal(t, 30*time.Second, c.Replay.Lease.D())
	require.Equal(t, 500, c.Replay.BatchSize)
	require.Equal(t, 1000, c.Replay.Window)
	require.Equal(t, 1<<20, c.Replay.ControlMaxBytes)
	require.Equal(t, 2*time.Minute, c.Replay.ConfirmTimeout.D())
	require.False(t, c.Replay.KeepUserID, "user_id is dropped unless asked")
	require.Equal(t, "retry", c.Replay.OnUnknown, "an unknown outcome is sent again unless asked")
	require.Equal(t, 3, c.Replay.UnknownRetries)

	c, err = config.Load(config.Flags{}, func(k string) string {
		return map[string]string{
			"DLQ_REPLAY_MAX_REPLAYS": "3", "DLQ_REPLAY_LEASE": "5s", "DLQ_REPLAY_BATCH_SIZE": "200",
			"DLQ_REPLAY_WINDOW": "300", "DLQ_REPLAY_MAX_TASKS": "2", "DLQ_REPLAY_MAX_TASK_MESSAGES": "5000",
			"DLQ_REPLAY_POLL_INTERVAL": "250ms", "DLQ_CONTROL_CONSUMERS": "3", "DLQ_CONTROL_MAX_BYTES": "65536",
			"DLQ_REPLAY_CONFIRM_TIMEOUT": "45s", "DLQ_REPLAY_KEEP_USER_ID": "true",
			"DLQ_REPLAY_ON_UNKNOWN": "hold", "DLQ_REPLAY_UNKNOWN_RETRIES": "5",
		}[k]
	})
	require.NoError(t, err)
	require.Equal(t, config.Replay{
		MaxReplays: 3, Lease: config.Duration(5 * time.Second), BatchSize: 200, Window: 300, MaxTasks: 2,
		MaxTaskMessages: 5000, PollInterval: config.Duration(250 * time.Millisecond), ControlConsumers: 3, ControlMaxBytes: 65536,
		ConfirmTimeout: config.Duration(45 * time.Second), KeepUserID: true, OnUnknown: "hold", UnknownRetries: 5,
	}, c.Replay)

	file := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(file, []byte("replay:\n  max_replays: 9\n  lease: 1m\n  confirm_timeout: 10s\n  keep_user_id: true\n  on_unknown: hold\n"), 0o600))
	c, err = config.Load(config.Flags{ConfigFile: file}, func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, 9, c.Replay.MaxReplays)
	require.Equal(t, time.Minute, c.Replay.Lease.D())
	require.Equal(t, 10*time.Second, c.Replay.ConfirmTimeout.D())
	require.True(t, c.Replay.KeepUserID)
	require.Equal(t, "hold", c.Replay.OnUnknown)
}

func TestReplaySectionErrorsNameTheSetting(t *testing.T) {
	for k, v := range map[string]string{
		"DLQ_REPLAY_MAX_REPLAYS":       "0",
		"DLQ_REPLAY_LEASE":             "10ms",
		"DLQ_REPLAY_BATCH_SIZE":        "0",
		"DLQ_REPLAY_WINDOW":            "70000",
		"DLQ_REPLAY_MAX_TASKS":         "0",
		"DLQ_REPLAY_MAX_TASK_MESSAGES": "0",
		"DLQ_REPLAY_POLL_INTERVAL":     "1h",
		"DLQ_CONTROL_CONSUMERS":        "100",
		"DLQ_CONTROL_MAX_BYTES":        "10",
		"DLQ_REPLAY_CONFIRM_TIMEOUT":   "100ms",
		"DLQ_REPLAY_KEEP_USER_ID":      "maybe",
		"DLQ_REPLAY_ON_UNKNOWN":        "drop",
		"DLQ_REPLAY_UNKNOWN_RETRIES":   "11",
	} {
		_, err := config.Load(config.Flags{}, func(key string) string {
			if key == k {
				return v
			}
			return ""
		})
		require.Error(t, err, k)
		require.Contains(t, err.Error(), k)
	}
	_, err := config.Load(config.Flags{}, func(key string) string {
		if key == "DLQ_REPLAY_LEASE" {
			return "soon"
		}
		return ""
	})
	require.ErrorContains(t, err, "DLQ_REPLAY_LEASE")

	// Both names of the setting, from the environment and from YAML.
	_, err = config.Load(config.Flags{}, func(key string) string {
		return map[string]string{"DLQ_REPLAY_CONFIRM_TIMEOUT": "2h", "DLQ_REPLAY_KEEP_USER_ID": "yes please"}[key]
	})
	require.ErrorContains(t, err, "replay.keep_user_id / DLQ_REPLAY_KEEP_USER_ID")
	file := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(file, []byte("replay:\n  confirm_timeout: 0s\n"), 0o600))
	_, err = config.Load(config.Flags{ConfigFile: file}, func(string) string { return "" })
	require.ErrorContains(t, err, "replay.confirm_timeout / DLQ_REPLAY_CONFIRM_TIMEOUT")
	require.NoError(t, os.WriteFile(file, []byte("replay:\n  on_unknown: Retry\n  unknown_retries: 0\n"), 0o600))
	_, err = config.Load(config.Flags{ConfigFile: file}, func(string) string { return "" })
	require.ErrorContains(t, err, `replay.on_unknown / DLQ_REPLAY_ON_UNKNOWN "Retry" must be retry`)
	require.ErrorContains(t, err, "replay.unknown_retries / DLQ_REPLAY_UNKNOWN_RETRIES 0 must be between 1 and 10")
}
