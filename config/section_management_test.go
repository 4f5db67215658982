package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/config"
)

func TestManagementSection(t *testing.T) {
	t.Parallel()
	c, err := config.Load(config.Flags{}, env(nil))
	require.NoError(t, err)
	require.Empty(t, c.Management.URL, "the policy check is off by default")
	require.Equal(t, time.Minute, c.Management.Interval.D())

	// Credentials and vhost come from the AMQP URL unless the management
	// URL has its own.
	c, err = config.Load(config.Flags{}, env(map[string]string{
		"DLQ_AMQP_URL":            "amqp://ops:pw1@rabbit:5672/prod",
		"DLQ_MANAGEMENT_URL":      "http://rabbit:15672/",
		"DLQ_MANAGEMENT_INTERVAL": "30s",
	}))
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, c.Management.Interval.D())
	base, user, pw, vhost := c.ManagementCredentials()
	require.Equal(t, []string{"http://rabbit:15672/", "ops", "pw1", "prod"}, []string{base, user, pw, vhost})

	// A cluster's nodes share users and virtual hosts: the first URL's.
	c, err = config.Load(config.Flags{}, env(map[string]string{
		"DLQ_AMQP_URL":       "amqp://ops:pw1@rabbit1:5672/prod,amqp://ops:pw1@rabbit2:5672/prod",
		"DLQ_MANAGEMENT_URL": "http://rabbit1:15672/",
	}))
	require.NoError(t, err)
	base, user, pw, vhost = c.ManagementCredentials()
	require.Equal(t, []string{"http://rabbit1:15672/", "ops", "pw1", "prod"}, []string{base, user, pw, vhost})

	file := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(file, []byte("management:\n  url: https://admin:pw2@mgmt.example:443/\n  interval: 5m\n"), 0o600))
	c, err = config.Load(config.Flags{ConfigFile: file}, env(nil))
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, c.Management.Interval.D())
	base, user, pw, vhost = c.ManagementCredentials()
	require.Equal(t, []string{"https://mgmt.example:443/", "admin", "pw2", "/"}, []string{base, user, pw, vhost})
}
