package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/config"
)

// TestAPISection covers the api section: defaults, tokens from YAML, the
// environment, and errors that name the setting.
func TestAPISection(t *testing.T) {
	c, err := config.Load(config.Flags{}, env(nil))
	require.NoError(t, err)
	require.Equal(t, config.API{RatePerSecond: 50, RateBurst: 100, MaxBodyBytes: 1 << 20, ConfirmAbove: 1000,
		AuthFailureRate: 0.1, AuthFailureBurst: 10, ApprovalTTL: config.Duration(24 * time.Hour)}, c.API)

	file := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
admin_token: root-secret
api:
  tokens:
    - name: ops
      token_sha256: `+auth.Digest("ops-secret")+`
      role: operator
      queues: [orders, billing]
    - name: dash
      token: dash-secret
      role: viewer
      bodies: true
  rate_per_second: 5
  confirm_above: 10
  auth_failure_rate: 0.5
  auth_failure_burst: 2
`), 0o600))
	c, err = config.Load(config.Flags{ConfigFile: file}, env(map[string]string{"DLQ_API_BURST": "7", "DLQ_API_MAX_BODY_BYTES": "4096",
		"DLQ_API_AUTH_FAILURE_BURST": "3"}))
	require.NoError(t, err)
	require.Len(t, c.API.Tokens, 2)
	require.Equal(t, []string{"orders", "billing"}, c.API.Tokens[0].Queues)
	require.EqualValues(t, 5, c.API.RatePerSecond)
	require.Equal(t, 7, c.API.RateBurst)
	require.EqualValues(t, 4096, c.API.MaxBodyBytes)
	require.EqualValues(t, 10, c.API.ConfirmAbove)
	require.Equal(t, 0.5, c.API.AuthFailureRate)
	require.Equal(t, 3, c.API.AuthFailureBurst, "the environment wins over the file")
	a, err := auth.New(c.AuthConfig())
	require.NoError(t, err)
	p, err := a.Authenticate("ops-secret")
	require.NoError(t, err)
	require.Equal(t, "ops", p.Name)
	p, err = a.Authenticate("root-secret")
	require.NoError(t, err)
	require.Equal(t, auth.RoleAdmin, p.Role)
	// The failure throttle is configured: three wrong tokens, then 429.
	for range 3 {
		_, err = a.AuthenticateFrom("192.0.2.1", "guess")
		require.ErrorIs(t, err, auth.ErrBadToken)
	}
	_, err = a.AuthenticateFrom("192.0.2.1", "root-secret")
	var te *auth.ThrottledError
	require.ErrorAs(t, err, &te)
	c, err = config.Load(config.Flags{}, env(map[string]string{"DLQ_API_AUTH_FAILURE_RATE": "-1"}))
	require.NoError(t, err, "negative disables the throttle")
	require.Equal(t, -1.0, c.API.AuthFailureRate)

	for vars, want := range map[string]map[string]string{
		"DLQ_API_RATE":               {"DLQ_API_RATE": "fast"},
		"api.rate_per_second":        {"DLQ_API_RATE": "0"},
		"api.max_body_bytes":         {"DLQ_API_MAX_BODY_BYTES": "10"},
		"api.confirm_above":          {"DLQ_API_CONFIRM_ABOVE": "-1"},
		"DLQ_API_CONFIRM_ABOVE=":     {"DLQ_API_CONFIRM_ABOVE": "many"},
		"DLQ_API_AUTH_FAILURE_RATE=": {"DLQ_API_AUTH_FAILURE_RATE": "lots"},
		"api.auth_failure_rate":      {"DLQ_API_AUTH_FAILURE_RATE": "0"},
		"api.auth_failure_burst":     {"DLQ_API_AUTH_FAILURE_BURST": "0"},
		"DLQ_API_AUTH_FAILURE_BURST": {"DLQ_API_AUTH_FAILURE_BURST": "x"},
	} {
		_, err := config.Load(config.Flags{}, env(want))
		require.Error(t, err)
		require.Contains(t, err.Error(), vars)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("api:\n  tokens:\n    - name: x\n      token: y\n      role: superuser\n"), 0o600))
	_, err = config.Load(config.Flags{ConfigFile: bad}, env(nil))
	require.Error(t, err)
	require.Contains(t, err.Error(), `api.tokens`)
	require.Contains(t, err.Error(), `role "superuser"`)
}
