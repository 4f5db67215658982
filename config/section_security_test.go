package config_test

import (
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/config"
)

func secretFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	require.NoError(t, os.Chmod(p, mode))
	return p
}

func newKey(t *testing.T, id string) string {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return id + ":" + base64.StdEncoding.EncodeToString(b)
}

// TestSecuritySection covers encryption, redaction, TLS and the secret
// files: defaults, the environment, YAML, and errors that name the
// setting without quoting a secret.
func TestSecuritySection(t *testing.T) {
	t.Parallel()
	c, err := config.Load(config.Flags{}, env(nil))
	require.NoError(t, err)
	require.Equal(t, config.Encryption{Headers: []string{"*"}}, c.Encryption)
	require.Nil(t, c.SealHeader(), "every header is sealed by default")
	_, err = c.EncryptionKeys()
	require.Error(t, err, "no keys: encryption off")
	tlsCfg, err := c.AMQPClientTLS()
	require.NoError(t, err)
	require.Nil(t, tlsCfg)
	require.False(t, c.TLS.Enabled())

	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	c, err = config.Load(config.Flags{}, env(map[string]string{
		"DLQ_ENCRYPTION_KEYS":               k2 + "," + k1,
		"DLQ_ENCRYPTION_HEADERS":            "authorization, x-user",
		"DLQ_ENCRYPTION_ALLOW_MISSING_KEYS": "true",
		"DLQ_REDACT_HEADERS":                "authorization",
		"DLQ_REDACT_BODY_PATHS":             "card.number,$.user.email",
		"DLQ_REDACT_REVEAL_ROLE":            "admin",
		"DLQ_TLS_RELOAD_INTERVAL":           "5s",
		"DLQ_AMQP_SERVER_NAME":              "rabbit.internal",
	}))
	require.NoError(t, err)
	keys, err := c.EncryptionKeys()
	require.NoError(t, err)
	require.Equal(t, "k2", keys[0].ID)
	seal := c.SealHeader()
	require.True(t, seal("Authorization"))
	require.True(t, seal("x-exception-message"), "failure details' headers are sealed with them")
	require.False(t, seal("x-tenant"))
	require.True(t, c.Encryption.AllowMissingKeys)
	require.Equal(t, config.Redaction{Headers: []string{"authorization"}, BodyPaths: []string{"card.number", "$.user.email"}, RevealRole: "admin"}, c.Redaction)
	tlsCfg, err = c.AMQPClientTLS()
	require.NoError(t, err)
	require.Equal(t, "rabbit.internal", tlsCfg.ServerName)

	keyFile := secretFile(t, "# the keys\n"+k1+"\n", 0o600)
	file := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
encryption:
  keys_file: `+keyFile+`
  headers: [authorization]
redaction:
  headers: [authorization]
  reveal_role: operator
`), 0o600))
	c, err = config.Load(config.Flags{ConfigFile: file}, env(nil))
	require.NoError(t, err)
	keys, err = c.EncryptionKeys()
	require.NoError(t, err)
	require.Equal(t, "k1", keys[0].ID)
}

func TestSecuritySectionBadValues(t *testing.T) {
	t.Parallel()
	k1 := newKey(t, "k1")
	secret := strings.TrimPrefix(k1, "k1:")
	exposed := secretFile(t, k1, 0o644)
	for _, c := range []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"DLQ_ENCRYPTION_KEYS": "k1:" + secret[:20]}, []string{"encryption key 1 (id k1)", "32 bytes"}},
		{map[string]string{"DLQ_ENCRYPTION_KEYS": secret}, []string{"encryption key 1 is not id:base64"}},
		{map[string]string{"DLQ_ENCRYPTION_KEYS": k1, "DLQ_ENCRYPTION_KEYS_FILE": "/x"}, []string{"DLQ_ENCRYPTION_KEYS or DLQ_ENCRYPTION_KEYS_FILE, not both"}},
		{map[string]string{"DLQ_ENCRYPTION_KEYS_FILE": exposed}, []string{"DLQ_ENCRYPTION_KEYS_FILE", exposed, "0644", "readable or writable by other users"}},
		{map[string]string{"DLQ_ENCRYPTION_HEADERS": "a,,b, "}, nil}, // empty entries are dropped by the list parser
		{map[string]string{"DLQ_ENCRYPTION_ALLOW_MISSING_KEYS": "maybe"}, []string{"encryption.allow_missing_keys", "DLQ_ENCRYPTION_ALLOW_MISSING_KEYS"}},
		{map[string]string{"DLQ_REDACT_REVEAL_ROLE": "root"}, []string{"redaction.reveal_role / DLQ_REDACT_REVEAL_ROLE", `"root"`}},
		{map[string]string{"DLQ_TLS_CERT": "/etc/dlq/tls.crt"}, []string{"DLQ_TLS_CERT and DLQ_TLS_KEY", "both or neither"}},
		{map[string]string{"DLQ_TLS_KEY": "/etc/dlq/tls.key"}, []string{"DLQ_TLS_CERT and DLQ_TLS_KEY"}},
		{map[string]string{"DLQ_TLS_RELOAD_INTERVAL": "10ms"}, []string{"tls.reload_interval / DLQ_TLS_RELOAD_INTERVAL"}},
		{map[string]string{"DLQ_TLS_RELOAD_INTERVAL": "often"}, []string{"DLQ_TLS_RELOAD_INTERVAL", "not a duration"}},
		{map[string]string{"DLQ_AMQP_CERT_FILE": "/c.pem"}, []string{"DLQ_AMQP_CERT_FILE and DLQ_AMQP_KEY_FILE"}},
		{map[string]string{"DLQ_AMQP_KEY_FILE": "/k.pem"}, []string{"DLQ_AMQP_CERT_FILE and DLQ_AMQP_KEY_FILE"}},
		{map[string]string{"DLQ_ADMIN_TOKEN": "a", "DLQ_ADMIN_TOKEN_FILE": "/x"}, []string{"set DLQ_ADMIN_TOKEN or DLQ_ADMIN_TOKEN_FILE, not both"}},
		{map[string]string{"DLQ_ADMIN_TOKEN_FILE": exposed}, []string{"DLQ_ADMIN_TOKEN_FILE", "0644"}},
		{map[string]string{"DLQ_AMQP_URL_FILE": "/nonexistent/url"}, []string{"DLQ_AMQP_URL_FILE", "no such file"}},
		{map[string]string{"DLQ_DATABASE_URL_FILE": exposed}, []string{"DLQ_DATABASE_URL_FILE", "0644"}},
		{map[string]string{"DLQ_MANAGEMENT_URL_FILE": exposed}, []string{"DLQ_MANAGEMENT_URL_FILE", "0644"}},
	} {
		_, err := config.Load(config.Flags{}, env(c.env))
		if c.want == nil {
			require.NoError(t, err, "%v", c.env)
			continue
		}
		require.Error(t, err, "%v", c.env)
		for _, w := range c.want {
			require.Contains(t, err.Error(), w, "%v", c.env)
		}
		require.NotContains(t, err.Error(), secret, "a key is never quoted")
		require.NotContains(t, err.Error(), secret[:12])
	}
}

// TestSecretFiles: the *_FILE variables and api.tokens[].token_file read
// their secrets from private files.
func TestSecretFiles(t *testing.T) {
	t.Parallel()
	token := secretFile(t, "root-from-file\n", 0o400)
	dbURL := secretFile(t, "postgres://dlq:pw-from-file@db:5432/dlq?sslmode=verify-full\n", 0o600)
	amqpURL := secretFile(t, "amqps://dlq:pw@rabbit:5671/\n", 0o600)
	mgmt := secretFile(t, "https://dlq:pw@rabbit:15671/\n", 0o600)
	opsToken := secretFile(t, "ops-from-file", 0o600)
	file := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`
api:
  tokens:
    - name: ops
      token_file: `+opsToken+`
      role: operator
`), 0o600))
	c, err := config.Load(config.Flags{ConfigFile: file}, env(map[string]string{
		"DLQ_ADMIN_TOKEN_FILE": token, "DLQ_DATABASE_URL_FILE": dbURL, "DLQ_AMQP_URL_FILE": amqpURL, "DLQ_MANAGEMENT_URL_FILE": mgmt,
	}))
	require.NoError(t, err)
	require.Equal(t, "root-from-file", c.AdminToken)
	require.Equal(t, "postgres://dlq:pw-from-file@db:5432/dlq?sslmode=verify-full", c.DatabaseURL)
	require.Equal(t, "amqps://dlq:pw@rabbit:5671/", c.AMQPURL)
	require.Equal(t, "https://dlq:pw@rabbit:15671/", c.Management.URL)
	require.Equal(t, "ops-from-file", c.API.Tokens[0].Token)

	require.NoError(t, os.WriteFile(file, []byte(`
api:
  tokens:
    - name: ops
      token: inline
      token_file: `+opsToken+`
      role: operator
`), 0o600))
	_, err = config.Load(config.Flags{ConfigFile: file}, env(nil))
	require.ErrorContains(t, err, "api.tokens[0] (ops): give one of token, token_sha256 and token_file")
	require.NoError(t, os.Chmod(opsToken, 0o640))
	require.NoError(t, os.WriteFile(file, []byte("api:\n  tokens:\n    - name: ops\n      token_file: "+opsToken+"\n      role: operator\n"), 0o600))
	_, err = config.Load(config.Flags{ConfigFile: file}, env(nil))
	require.ErrorContains(t, err, "token_file")
	require.ErrorContains(t, err, "0640")
	require.NotContains(t, err.Error(), "ops-from-file")
}
