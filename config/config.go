package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/redact"
)

// Defaults for the public settings.
const (
	AMQPURLDefault      = "amqp://guest:guest@127.0.0.1:5672/"
	DatabaseURLDefault  = "postgres://postgres@127.0.0.1:5432/dlq?sslmode=disable"
	HTTPAddrDefault     = "127.0.0.1:8080"
	ExchangeDefault     = "dlx"
	QueueDefault        = "dlq"
	ControlQueueDefault = "dlq.control"
)

// Config is every setting of dlq. YAML keys are the snake_case field names.
type Config struct {
	AMQPURL      string   `yaml:"amqp_url"`
	DatabaseURL  string   `yaml:"database_url"`
	HTTPAddr     string   `yaml:"http_addr"`
	Exchange     string   `yaml:"exchange"`
	Queues       []string `yaml:"queues"`
	ControlQueue string   `yaml:"control_queue"`
	AdminToken   string   `yaml:"admin_token"`

	Log      Log      `yaml:"log"`
	Ingest   Ingest   `yaml:"ingest"`
	Topology Topology `yaml:"topology"`

	// Sections owned by later features live in their own files.
	Replay  Replay  `yaml:"replay"`
	API     API     `yaml:"api"`
	Cron    Cron    `yaml:"cron"`
	Cleanup Cleanup `yaml:"cleanup"`
	Alerts  Alerts  `yaml:"alerts"`

	// Management is RabbitMQ's management API, for the queue policy check.
	Management Management `yaml:"management"`

	// UI is the web console.
	UI UI `yaml:"ui"`

	// Recovery is failure categories and automatic replay policies.
	Recovery Recovery `yaml:"recovery"`
	// Encryption at rest, redaction and TLS (section_security.go).
	Encryption Encryption `yaml:"encryption"`
	Redaction  Redaction  `yaml:"redaction"`
	TLS        TLS        `yaml:"tls"`
	AMQPTLS    AMQPTLS    `yaml:"amqp_tls"`

	// NoMigrate skips applying migrations at serve start (flag --no-migrate).
	NoMigrate bool `yaml:"no_migrate"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Env DLQ_LOG_LEVEL.
	Level string `yaml:"level"`
	// Format is text or json. Env DLQ_LOG_FORMAT.
	Format string `yaml:"format"`
}

// Ingest tunes the consumers that store dead messages.
type Ingest struct {
	// Prefetch bounds unacknowledged deliveries per consumer. Env DLQ_PREFETCH.
	Prefetch int `yaml:"prefetch"`
	// BatchSize is the most messages written per transaction. Env DLQ_BATCH_SIZE.
	BatchSize int `yaml:"batch_size"`
	// BatchBytes is the most body bytes written per transaction. Env DLQ_BATCH_BYTES.
	BatchBytes int `yaml:"batch_bytes"`
	// Linger is how long a partial batch waits for more (longer while the
	// previous batch is still being written). Env DLQ_BATCH_LINGER.
	Linger Duration `yaml:"linger"`
	// Consumers is the number of consumers per DLQ queue. Env DLQ_CONSUMERS.
	Consumers int `yaml:"consumers"`
	// TextSearch makes q find words across every queue: the text indexer
	// (package textindex), which dlq serve runs, walks new rows behind a
	// mark and writes their documents off the ingest path (migrations
	// 00079, 00090); ingest names only the rows a replay brings back. On
	// by default; off, no indexer runs and the mark waits (docs/
	// BENCHMARKS.md, "Text search", has what it costs ingest). Env
	// DLQ_SEARCH_TEXT.
	TextSearch bool `yaml:"text_search"`
	// TextIndexDuty is the share of time, in percent, the text indexer
	// works while messages keep arriving or a replay task is running:
	// after a batch that took d it pauses d*(100-duty)/duty, so that it
	// never starves ingest or a replay on a small machine. When nothing
	// new arrives and no replay runs it works without pause to catch up.
	// Env DLQ_TEXT_INDEX_DUTY.
	TextIndexDuty int `yaml:"text_index_duty"`
}

// TextIndexDutyDefault is ingest.text_index_duty's default.
const TextIndexDutyDefault = 10

// Duration is a time.Duration that reads "250ms" or "1m" from YAML.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
// A wrong value is reported as a yaml.TypeError, so that decoding goes on
// and every wrong key of the file is reported at once (decodeYAML names it).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal !!%s into config.Duration", n.Line, yamlNodeKind(n))}}
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal !!str `%s` into config.Duration", n.Line, n.Value)}}
	}
	*d = Duration(v)
	return nil
}

func yamlNodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "seq"
	case yaml.MappingNode:
		return "map"
	}
	return "node"
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Default returns the built-in defaults.
func Default() Config {
	c := Config{
		AMQPURL:      AMQPURLDefault,
		DatabaseURL:  DatabaseURLDefault,
		HTTPAddr:     HTTPAddrDefault,
		Exchange:     ExchangeDefault,
		Queues:       []string{QueueDefault},
		ControlQueue: ControlQueueDefault,
		Log:          Log{Level: "info", Format: "text"},
		Ingest: Ingest{
			// consumer.Config's defaults, which config may not import
			// (docs/ARCHITECTURE.md, Dependencies); TestIngestDefaultsAreTheConsumers
			// holds the two equal.
			Prefetch:   1000,
			BatchSize:  500,
			BatchBytes: 32 << 20,
			Linger:     Duration(50 * time.Millisecond),
			Consumers:  3,
			TextSearch: true,

			TextIndexDuty: TextIndexDutyDefault,
		},
	}
	c.Replay = defaultReplay()
	c.API = defaultAPI()
	c.Cron = defaultCron()
	c.Cleanup = defaultCleanup()
	c.Alerts = defaultAlerts()
	c.Management = defaultManagement()
	c.UI = defaultUI()
	c.Recovery = defaultRecovery()
	c.Encryption = defaultEncryption()
	c.TLS = defaultTLS()
	return c
}

// Flags are the command-line flags that override configuration.
type Flags struct {
	ConfigFile  string
	AMQPURL     string
	DatabaseURL string
	HTTPAddr    string
	NoMigrate   bool
}

// Register adds the common flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.ConfigFile, "config", "", "YAML configuration file (optional)")
	fs.StringVar(&f.AMQPURL, "amqp-url", "", "RabbitMQ URL (overrides DLQ_AMQP_URL)")
	fs.StringVar(&f.DatabaseURL, "database-url", "", "PostgreSQL URL (overrides DLQ_DATABASE_URL)")
	fs.StringVar(&f.HTTPAddr, "http-addr", "", "HTTP listen address (overrides DLQ_HTTP_ADDR)")
	fs.BoolVar(&f.NoMigrate, "no-migrate", false, "do not apply migrations at start")
}

// Load builds the configuration: defaults, then the YAML file, then the
// environment (getenv), then flags.
func Load(f Flags, getenv func(string) string) (Config, error) {
	c := Default()
	if f.ConfigFile != "" {
		b, err := os.ReadFile(f.ConfigFile)
		if err != nil {
			return Config{}, fmt.Errorf("config: read --config file: %w", err)
		}
		if err := decodeYAML(f.ConfigFile, b, &c); err != nil {
			return Config{}, err
		}
	}
	if err := errors.Join(checkSecretFileVars(getenv), applyEnv(&c, getenv), c.resolveTokenFiles()); err != nil {
		return Config{}, err
	}
	if f.AMQPURL != "" {
		c.AMQPURL = f.AMQPURL
	}
	if f.DatabaseURL != "" {
		c.DatabaseURL = f.DatabaseURL
	}
	if f.HTTPAddr != "" {
		c.HTTPAddr = f.HTTPAddr
	}
	if f.NoMigrate {
		c.NoMigrate = true
	}
	c.Cron.trimSchedules()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

type envVar struct {
	name  string
	apply func(c *Config, v string) error
}

func strVar(dst func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *dst(c) = v; return nil }
}

func intVar(name string, dst func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("config: %s=%q is not a whole number", name, v)
		}
		*dst(c) = n
		return nil
	}
}

func durVar(name string, dst func(*Config) *Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("config: %s=%q is not a duration (use e.g. 250ms, 30s, 5m)", name, v)
		}
		*dst(c) = Duration(d)
		return nil
	}
}

func listVar(dst func(*Config) *[]string) func(*Config, string) error {
	return func(c *Config, v string) error {
		var out []string
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		*dst(c) = out
		return nil
	}
}

// envVars lists every environment variable dlq reads. Later features add
// theirs in extraEnvVars (config_*.go files).
func envVars() []envVar {
	v := []envVar{
		{"DLQ_AMQP_URL", strVar(func(c *Config) *string { return &c.AMQPURL })},
		{"DLQ_DATABASE_URL", strVar(func(c *Config) *string { return &c.DatabaseURL })},
		{"DLQ_HTTP_ADDR", strVar(func(c *Config) *string { return &c.HTTPAddr })},
		{"DLQ_EXCHANGE", strVar(func(c *Config) *string { return &c.Exchange })},
		{"DLQ_QUEUES", listVar(func(c *Config) *[]string { return &c.Queues })},
		{"DLQ_CONTROL_QUEUE", strVar(func(c *Config) *string { return &c.ControlQueue })},
		{"DLQ_ADMIN_TOKEN", strVar(func(c *Config) *string { return &c.AdminToken })},
		{"DLQ_LOG_LEVEL", strVar(func(c *Config) *string { return &c.Log.Level })},
		{"DLQ_LOG_FORMAT", strVar(func(c *Config) *string { return &c.Log.Format })},
		{"DLQ_PREFETCH", intVar("DLQ_PREFETCH", func(c *Config) *int { return &c.Ingest.Prefetch })},
		{"DLQ_BATCH_SIZE", intVar("DLQ_BATCH_SIZE", func(c *Config) *int { return &c.Ingest.BatchSize })},
		{"DLQ_BATCH_BYTES", intVar("DLQ_BATCH_BYTES", func(c *Config) *int { return &c.Ingest.BatchBytes })},
		{"DLQ_BATCH_LINGER", durVar("DLQ_BATCH_LINGER", func(c *Config) *Duration { return &c.Ingest.Linger })},
		{"DLQ_CONSUMERS", intVar("DLQ_CONSUMERS", func(c *Config) *int { return &c.Ingest.Consumers })},
		{"DLQ_TEXT_INDEX_DUTY", intVar("DLQ_TEXT_INDEX_DUTY", func(c *Config) *int { return &c.Ingest.TextIndexDuty })},
		{"DLQ_SEARCH_TEXT", replayBoolVar("ingest.text_search", "DLQ_SEARCH_TEXT", func(c *Config) *bool { return &c.Ingest.TextSearch })},
	}
	return append(v, extraEnvVars()...)
}

// envKeys names the YAML key each environment variable sets, so that an
// unparseable value names both. Sections whose messages already name their
// key are not listed.
var envKeys = map[string]string{
	"DLQ_PREFETCH":                 "ingest.prefetch",
	"DLQ_BATCH_SIZE":               "ingest.batch_size",
	"DLQ_BATCH_BYTES":              "ingest.batch_bytes",
	"DLQ_BATCH_LINGER":             "ingest.linger",
	"DLQ_CONSUMERS":                "ingest.consumers",
	"DLQ_TEXT_INDEX_DUTY":          "ingest.text_index_duty",
	"DLQ_CRON_RECONCILE_INTERVAL":  "cron.reconcile_interval",
	"DLQ_CRON_LEASE_TTL":           "cron.lease_ttl",
	"DLQ_CRON_DISABLED":            "cron.disabled",
	"DLQ_RETENTION_REPLAYED":       "cleanup.retention.replayed",
	"DLQ_RETENTION_ACKNOWLEDGED":   "cleanup.retention.acknowledged",
	"DLQ_CLEANUP_BATCH_SIZE":       "cleanup.batch_size",
	"DLQ_CLEANUP_BATCH_TIMEOUT":    "cleanup.batch_timeout",
	"DLQ_CLEANUP_PAUSE":            "cleanup.pause",
	"DLQ_MAX_MESSAGES":             "cleanup.max_messages",
	"DLQ_MAX_BYTES":                "cleanup.max_bytes",
	"DLQ_ALLOW_EVICT_PENDING":      "cleanup.allow_evict_pending",
	"DLQ_CONTROL_COMMAND_TTL":      "cleanup.control_command_ttl",
	"DLQ_REPLAY_TASK_TTL":          "cleanup.replay_task_ttl",
	"DLQ_JOB_RUN_TTL":              "cleanup.job_run_ttl",
	"DLQ_AUDIT_TTL":                "cleanup.audit_ttl",
	"DLQ_INGEST_INFLIGHT_TTL":      "cleanup.ingest_inflight_ttl",
	"DLQ_MANAGEMENT_INTERVAL":      "management.interval",
	"DLQ_REPLAY_MAX_REPLAYS":       "replay.max_replays",
	"DLQ_REPLAY_LEASE":             "replay.lease",
	"DLQ_REPLAY_BATCH_SIZE":        "replay.batch_size",
	"DLQ_REPLAY_WINDOW":            "replay.window",
	"DLQ_REPLAY_MAX_TASKS":         "replay.max_tasks",
	"DLQ_REPLAY_MAX_TASK_MESSAGES": "replay.max_task_messages",
	"DLQ_REPLAY_POLL_INTERVAL":     "replay.poll_interval",
	"DLQ_REPLAY_CONFIRM_TIMEOUT":   "replay.confirm_timeout",
	"DLQ_REPLAY_UNKNOWN_RETRIES":   "replay.unknown_retries",
	"DLQ_CONTROL_CONSUMERS":        "replay.control_consumers",
	"DLQ_CONTROL_MAX_BYTES":        "replay.control_max_bytes",
	"DLQ_API_RATE":                 "api.rate_per_second",
	"DLQ_API_BURST":                "api.rate_burst",
	"DLQ_API_AUTH_FAILURE_RATE":    "api.auth_failure_rate",
	"DLQ_API_AUTH_FAILURE_BURST":   "api.auth_failure_burst",
	"DLQ_API_MAX_BODY_BYTES":       "api.max_body_bytes",
	"DLQ_API_CONFIRM_ABOVE":        "api.confirm_above",
	"DLQ_APPROVAL_ABOVE":           "api.approval_above",
	"DLQ_APPROVAL_TTL":             "api.approval_ttl",
	"DLQ_UI_SESSION_TTL":           "ui.session_ttl",
	"DLQ_TLS_RELOAD_INTERVAL":      "tls.reload_interval",
}

// applyEnv applies every DLQ_* variable that is set, and reports every one
// that cannot be parsed, not only the first.
func applyEnv(c *Config, getenv func(string) string) error {
	var errs []error
	for _, e := range envVars() {
		v := getenv(e.name)
		if v == "" {
			continue
		}
		if err := e.apply(c, v); err != nil {
			if key, ok := envKeys[e.name]; ok {
				err = fmt.Errorf("%w (the %s setting)", err, key)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Validate checks every setting and names the first wrong one.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config: "+format, a...)) }
	// One URL, or a cluster's nodes separated by commas (broker.SplitURLs).
	for _, raw := range broker.SplitURLs(c.AMQPURL) {
		if u, err := url.Parse(raw); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
			bad("amqp_url / DLQ_AMQP_URL / --amqp-url %q must be an amqp:// or amqps:// URL with a host, or several separated by commas (e.g. %s)", redact.URL(raw), AMQPURLDefault)
		}
	}
	if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		bad("database_url / DLQ_DATABASE_URL / --database-url %q %v (e.g. %s)", redact.URL(c.DatabaseURL), err, DatabaseURLDefault)
	}
	if err := checkListenAddr(c.HTTPAddr); err != nil {
		bad("http_addr / DLQ_HTTP_ADDR / --http-addr %q must be host:port with a port from 0 to 65535 (e.g. %s, or :8080 for every interface): %v", c.HTTPAddr, HTTPAddrDefault, err)
	}
	if err := checkName(c.Exchange); err != nil {
		bad("exchange / DLQ_EXCHANGE %q %v (e.g. %s; the default exchange cannot be a dead-letter target here)", c.Exchange, err, ExchangeDefault)
	}
	if len(c.Queues) == 0 {
		bad("queues / DLQ_QUEUES must name at least one queue (e.g. %s)", QueueDefault)
	}
	seen := map[string]bool{}
	for _, q := range c.Queues {
		if seen[q] {
			bad("queues / DLQ_QUEUES lists %q twice", q)
		}
		seen[q] = true
		if err := checkName(q); err != nil {
			bad("queues / DLQ_QUEUES: queue name %q %v", q, err)
		}
	}
	if err := checkName(c.ControlQueue); err != nil {
		bad("control_queue / DLQ_CONTROL_QUEUE %q %v (e.g. %s)", c.ControlQueue, err, ControlQueueDefault)
	}
	if seen[c.ControlQueue] {
		bad("control_queue / DLQ_CONTROL_QUEUE %q is also listed in queues: the control queue carries commands, not dead messages", c.ControlQueue)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level / DLQ_LOG_LEVEL %q must be debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format / DLQ_LOG_FORMAT %q must be text or json", c.Log.Format)
	}
	in := c.Ingest
	if in.Prefetch < 1 || in.Prefetch > 65535 {
		bad("ingest.prefetch / DLQ_PREFETCH %d must be between 1 and 65535", in.Prefetch)
	}
	if in.TextIndexDuty < 1 || in.TextIndexDuty > 100 {
		bad("ingest.text_index_duty / DLQ_TEXT_INDEX_DUTY %d must be a percentage from 1 to 100", in.TextIndexDuty)
	}
	if in.BatchSize < 1 {
		bad("ingest.batch_size / DLQ_BATCH_SIZE %d must be >= 1", in.BatchSize)
	}
	if in.BatchSize > in.Prefetch {
		bad("ingest.batch_size / DLQ_BATCH_SIZE %d must not exceed ingest.prefetch %d, or batches could never fill", in.BatchSize, in.Prefetch)
	}
	if in.BatchBytes < 1<<10 {
		bad("ingest.batch_bytes / DLQ_BATCH_BYTES %d must be >= 1024", in.BatchBytes)
	}
	if in.Linger.D() < time.Millisecond || in.Linger.D() > time.Minute {
		bad("ingest.linger / DLQ_BATCH_LINGER %s must be between 1ms and 1m", in.Linger.D())
	}
	if in.Consumers < 1 || in.Consumers > 64 {
		bad("ingest.consumers / DLQ_CONSUMERS %d must be between 1 and 64", in.Consumers)
	}
	errs = append(errs, c.Topology.validate(c)...)
	errs = append(errs, c.validateExtra()...)
	return errors.Join(errs...)
}

// checkName checks an exchange or queue name as RabbitMQ would: not empty,
// at most 255 bytes, and not in the amq. namespace RabbitMQ reserves.
func checkName(n string) error {
	switch {
	case n == "":
		return errors.New("must not be empty")
	case len(n) > 255:
		return fmt.Errorf("is %d bytes long; RabbitMQ allows at most 255", len(n))
	case strings.HasPrefix(n, "amq."):
		return errors.New("uses the prefix amq., which RabbitMQ reserves")
	}
	return nil
}

// checkDatabaseURL accepts what pgx accepts: a postgres:// or
// postgresql:// URL, or a keyword=value connection string.
func checkDatabaseURL(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		return errors.New("must be set")
	}
	if !strings.Contains(s, "://") {
		if !strings.Contains(s, "=") {
			return errors.New("must be a postgres:// URL or a keyword=value connection string")
		}
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("is not a valid URL")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return fmt.Errorf("must be a postgres:// or postgresql:// URL, not %s://", u.Scheme)
	}
	return nil
}

// checkListenAddr accepts host:port and :port, with a numeric port.
func checkListenAddr(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}
