package dlqtest_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

func TestServerCommandsCanBeOverridden(t *testing.T) {
	t.Setenv("DLQ_TEST_RABBITMQCTL", "echo via docker rabbitmqctl")
	out, err := dlqtest.Rabbitmqctl(context.Background(), "close_all_connections", "why").Output()
	require.NoError(t, err)
	require.Equal(t, "via docker rabbitmqctl close_all_connections why\n", string(out))

	t.Setenv("DLQ_TEST_PG_STOP", "docker compose stop -t 0 postgres")
	t.Setenv("DLQ_TEST_PG_START", "docker compose start postgres")
	stop, err := dlqtest.PostgresCommand("stop")
	require.NoError(t, err)
	require.Equal(t, "docker compose stop -t 0 postgres", stop)
	start, err := dlqtest.PostgresCommand("start")
	require.NoError(t, err)
	require.Equal(t, "docker compose start postgres", start)
	_, err = dlqtest.PostgresCommand("restart")
	require.Error(t, err)
}

func TestServerCommandDefaults(t *testing.T) {
	t.Setenv("DLQ_TEST_RABBITMQCTL", "")
	t.Setenv("DLQ_TEST_PG_STOP", "")
	t.Setenv("DLQ_TEST_PG_START", "")
	// Read-only: lists queues on the shared broker.
	out, err := dlqtest.Rabbitmqctl(context.Background(), "list_queues", "-q", "--no-table-headers", "name").CombinedOutput()
	require.NoError(t, err, "the default rabbitmqctl: %s", out)
	if _, err := os.Stat("/etc/postgresql"); err != nil {
		t.Skip("no local Debian PostgreSQL cluster: the fault tests need DLQ_TEST_PG_STOP and DLQ_TEST_PG_START")
	}
	stop, err := dlqtest.PostgresCommand("stop")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(stop, "pg_ctlcluster --skip-systemctl-redirect "), stop)
	require.True(t, strings.HasSuffix(stop, " main stop -m fast"), stop)
	require.True(t, dlqtest.PostgresUp())
}
