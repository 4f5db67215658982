package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/internal/secrets"
	"github.com/dlq/dlq/internal/tlsconf"
)

// Encryption at rest, redaction, TLS and secrets (docs/SECURITY.md).
//
//	encryption:
//	  keys_file: /run/secrets/dlq-keys   # DLQ_ENCRYPTION_KEYS_FILE (or the keys in DLQ_ENCRYPTION_KEYS)
//	  headers: ["*"]                      # DLQ_ENCRYPTION_HEADERS: the headers sealed, "*" for all
//	  allow_missing_keys: false           # DLQ_ENCRYPTION_ALLOW_MISSING_KEYS
//	redaction:
//	  headers: [authorization]            # DLQ_REDACT_HEADERS
//	  body_paths: [card.number]           # DLQ_REDACT_BODY_PATHS
//	  reveal_role: ""                     # DLQ_REDACT_REVEAL_ROLE: who sees real values ("" nobody)
//	tls:
//	  cert_file: /etc/dlq/tls.crt         # DLQ_TLS_CERT
//	  key_file: /etc/dlq/tls.key          # DLQ_TLS_KEY
//	  reload_interval: 10s                # DLQ_TLS_RELOAD_INTERVAL
//	amqp_tls:
//	  ca_file: /etc/dlq/rabbitmq-ca.pem   # DLQ_AMQP_CA_FILE
//	  cert_file: ""                       # DLQ_AMQP_CERT_FILE
//	  key_file: ""                        # DLQ_AMQP_KEY_FILE
//	  server_name: ""                     # DLQ_AMQP_SERVER_NAME

// Encryption configures encryption at rest. Off unless keys are given.
type Encryption struct {
	// Keys is DLQ_ENCRYPTION_KEYS: "id:base64" entries, the first one
	// encrypting. Never read from the YAML file, which is not a secret.
	Keys string `yaml:"-"`
	// KeysFile holds the keys, one per line; private to its owner. Env
	// DLQ_ENCRYPTION_KEYS_FILE.
	KeysFile string `yaml:"keys_file"`
	// Headers are the headers sealed: names, or "*" for every header. The
	// headers failure details are read from are always sealed with them.
	// Env DLQ_ENCRYPTION_HEADERS.
	Headers []string `yaml:"headers"`
	// AllowMissingKeys starts even when a key that still wraps data is not
	// configured (lost for good): those rows are flagged and unreadable.
	// Env DLQ_ENCRYPTION_ALLOW_MISSING_KEYS.
	AllowMissingKeys bool `yaml:"allow_missing_keys"`
}

// Redaction masks values in what principals read.
type Redaction struct {
	// Headers are masked header names. Env DLQ_REDACT_HEADERS.
	Headers []string `yaml:"headers"`
	// BodyPaths are masked JSON body paths. Env DLQ_REDACT_BODY_PATHS.
	BodyPaths []string `yaml:"body_paths"`
	// RevealRole is the least role that sees real values; empty: nobody.
	// Env DLQ_REDACT_REVEAL_ROLE.
	RevealRole string `yaml:"reveal_role"`
}

// TLS serves the HTTP API and the console over HTTPS.
type TLS struct {
	// CertFile and KeyFile are the PEM certificate (chain) and key. Both
	// or neither. Env DLQ_TLS_CERT, DLQ_TLS_KEY.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ReloadInterval is how often the files are checked for a change
	// (they are also read again on SIGHUP). Env DLQ_TLS_RELOAD_INTERVAL.
	ReloadInterval Duration `yaml:"reload_interval"`
}

// Enabled reports whether the API is served over TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// AMQPTLS is the client side of an amqps:// connection to RabbitMQ.
type AMQPTLS struct {
	// CAFile holds the CAs to trust (PEM). Env DLQ_AMQP_CA_FILE.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate. Env
	// DLQ_AMQP_CERT_FILE, DLQ_AMQP_KEY_FILE.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name RabbitMQ's certificate must carry; default
	// the URL's host. Env DLQ_AMQP_SERVER_NAME.
	ServerName string `yaml:"server_name"`
}

// TLS defaults and bounds.
const (
	TLSReloadIntervalDefault = 10 * time.Second
	TLSReloadIntervalMin     = time.Second
)

func defaultEncryption() Encryption { return Encryption{Headers: []string{"*"}} }

func defaultTLS() TLS { return TLS{ReloadInterval: Duration(TLSReloadIntervalDefault)} }

// secretFileVars are the *_FILE variables: the value of the variable
// without _FILE, read from a file private to its owner (container
// secrets). Giving both is an error.
var secretFileVars = map[string]func(*Config) *string{
	"DLQ_ADMIN_TOKEN_FILE":    func(c *Config) *string { return &c.AdminToken },
	"DLQ_AMQP_URL_FILE":       func(c *Config) *string { return &c.AMQPURL },
	"DLQ_DATABASE_URL_FILE":   func(c *Config) *string { return &c.DatabaseURL },
	"DLQ_MANAGEMENT_URL_FILE": func(c *Config) *string { return &c.Management.URL },
}

func secretFileVar(name string, dst func(*Config) *string) func(*Config, string) error {
	return func(c *Config, path string) error {
		v, err := secrets.ReadFile(path)
		if err != nil {
			return fmt.Errorf("config: %s: %w", name, err)
		}
		*dst(c) = strings.TrimSpace(v)
		return nil
	}
}

// securityEnvVars lists the environment variables of this file.
func securityEnvVars() []envVar {
	v := []envVar{
		{"DLQ_ENCRYPTION_KEYS", strVar(func(c *Config) *string { return &c.Encryption.Keys })},
		{"DLQ_ENCRYPTION_KEYS_FILE", strVar(func(c *Config) *string { return &c.Encryption.KeysFile })},
		{"DLQ_ENCRYPTION_HEADERS", listVar(func(c *Config) *[]string { return &c.Encryption.Headers })},
		{"DLQ_ENCRYPTION_ALLOW_MISSING_KEYS", replayBoolVar("encryption.allow_missing_keys", "DLQ_ENCRYPTION_ALLOW_MISSING_KEYS",
			func(c *Config) *bool { return &c.Encryption.AllowMissingKeys })},
		{"DLQ_REDACT_HEADERS", listVar(func(c *Config) *[]string { return &c.Redaction.Headers })},
		{"DLQ_REDACT_BODY_PATHS", listVar(func(c *Config) *[]string { return &c.Redaction.BodyPaths })},
		{"DLQ_REDACT_REVEAL_ROLE", strVar(func(c *Config) *string { return &c.Redaction.RevealRole })},
		{"DLQ_TLS_CERT", strVar(func(c *Config) *string { return &c.TLS.CertFile })},
		{"DLQ_TLS_KEY", strVar(func(c *Config) *string { return &c.TLS.KeyFile })},
		{"DLQ_TLS_RELOAD_INTERVAL", durVar("DLQ_TLS_RELOAD_INTERVAL", func(c *Config) *Duration { return &c.TLS.ReloadInterval })},
		{"DLQ_AMQP_CA_FILE", strVar(func(c *Config) *string { return &c.AMQPTLS.CAFile })},
		{"DLQ_AMQP_CERT_FILE", strVar(func(c *Config) *string { return &c.AMQPTLS.CertFile })},
		{"DLQ_AMQP_KEY_FILE", strVar(func(c *Config) *string { return &c.AMQPTLS.KeyFile })},
		{"DLQ_AMQP_SERVER_NAME", strVar(func(c *Config) *string { return &c.AMQPTLS.ServerName })},
	}
	names := make([]string, 0, len(secretFileVars))
	for n := range secretFileVars {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		v = append(v, envVar{n, secretFileVar(n, secretFileVars[n])})
	}
	return v
}

// checkSecretFileVars refuses a secret given both inline and in a file.
func checkSecretFileVars(getenv func(string) string) error {
	var errs []error
	pairs := []string{"DLQ_ENCRYPTION_KEYS_FILE"}
	for n := range secretFileVars {
		pairs = append(pairs, n)
	}
	slices.Sort(pairs)
	for _, n := range pairs {
		if getenv(n) != "" && getenv(strings.TrimSuffix(n, "_FILE")) != "" {
			errs = append(errs, fmt.Errorf("config: set %s or %s, not both", strings.TrimSuffix(n, "_FILE"), n))
		}
	}
	return errors.Join(errs...)
}

// resolveTokenFiles reads the token_file of every api.tokens entry.
func (c *Config) resolveTokenFiles() error {
	var errs []error
	for i := range c.API.Tokens {
		t := &c.API.Tokens[i]
		if t.TokenFile == "" {
			continue
		}
		if t.Token != "" || t.TokenSHA256 != "" {
			errs = append(errs, fmt.Errorf("config: api.tokens[%d] (%s): give one of token, token_sha256 and token_file", i, t.Name))
			continue
		}
		v, err := secrets.ReadFile(t.TokenFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("config: api.tokens[%d] (%s): token_file: %w", i, t.Name, err))
			continue
		}
		t.Token, t.TokenFile = strings.TrimSpace(v), ""
	}
	return errors.Join(errs...)
}

// EncryptionKeys reads the configured keys; crypt.ErrNoKeys when
// encryption is off.
func (c *Config) EncryptionKeys() ([]crypt.Key, error) {
	return crypt.LoadKeys(c.Encryption.Keys, c.Encryption.KeysFile)
}

// SealHeader says which headers encryption seals: nil for every header;
// otherwise the configured names (in any case) and the headers failure
// details are read from.
func (c *Config) SealHeader() func(string) bool {
	if slices.Contains(c.Encryption.Headers, "*") || len(c.Encryption.Headers) == 0 {
		return nil
	}
	names := make([]string, len(c.Encryption.Headers))
	for i, h := range c.Encryption.Headers {
		names[i] = strings.ToLower(h)
	}
	return func(name string) bool {
		return slices.Contains(names, strings.ToLower(name)) || broker.IsFailureHeader(name)
	}
}

// AMQPClientTLS is the TLS configuration of the connection to RabbitMQ,
// nil when nothing is set (amqps:// then trusts the system's CAs).
func (c *Config) AMQPClientTLS() (*tls.Config, error) {
	t := tlsconf.Client{CAFile: c.AMQPTLS.CAFile, CertFile: c.AMQPTLS.CertFile, KeyFile: c.AMQPTLS.KeyFile, ServerName: c.AMQPTLS.ServerName}
	if t.IsZero() {
		return nil, nil
	}
	cfg, err := t.Config()
	if err != nil {
		return nil, fmt.Errorf("config: amqp_tls: %w", err)
	}
	return cfg, nil
}

// validateSecurity checks this file's sections.
func (c *Config) validateSecurity() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config: "+format, a...)) }
	if _, err := c.EncryptionKeys(); err != nil && !errors.Is(err, crypt.ErrNoKeys) {
		bad("encryption keys: %v", err)
	}
	for _, h := range c.Encryption.Headers {
		if strings.TrimSpace(h) == "" {
			bad("encryption.headers / DLQ_ENCRYPTION_HEADERS must not hold an empty name")
		}
	}
	if r := c.Redaction.RevealRole; r != "" && !(auth.Principal{Role: r}).Can(auth.RoleViewer) {
		bad("redaction.reveal_role / DLQ_REDACT_REVEAL_ROLE %q must be viewer, operator, admin, or empty (nobody sees masked values)", r)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("tls: DLQ_TLS_CERT and DLQ_TLS_KEY (tls.cert_file, tls.key_file) go together: give both or neither")
	}
	if d := c.TLS.ReloadInterval.D(); d < TLSReloadIntervalMin {
		bad("tls.reload_interval / DLQ_TLS_RELOAD_INTERVAL %s must be at least %s", d, TLSReloadIntervalMin)
	}
	if (c.AMQPTLS.CertFile == "") != (c.AMQPTLS.KeyFile == "") {
		bad("amqp_tls: DLQ_AMQP_CERT_FILE and DLQ_AMQP_KEY_FILE go together: give both or neither")
	}
	return errs
}
