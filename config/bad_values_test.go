package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// badValue is one wrong value of one setting, given one way (environment,
// YAML or flag), and what its error must say: the setting, the value, and
// what is valid.
type badValue struct {
	// setting is the YAML key (ingest.prefetch) or, for what has no key,
	// the environment variable or flag; the coverage checks read it.
	setting string
	env     map[string]string
	yaml    string
	flags   Flags
	want    []string
}

// anyValue lists settings that accept every value of their type, so that
// they have no wrong value to test (a wrong type is still tested where
// YAML can express one).
var anyValue = map[string]string{
	"admin_token":     "any string is a token; empty means none",
	"DLQ_ADMIN_TOKEN": "any string is a token; empty means none",
	"cron.instance":   "a free-form name for leases",
	"DLQ_INSTANCE":    "a free-form name for leases",
	"no_migrate":      "tested as a wrong YAML type below",
	"topology.source_queues[].dead_letter_routing_key": "any routing key; its graph checks are in broker.TestTopologyValidate",
	"topology.source_queues[].dead_letter_exchange":    "any exchange name; a missing one is refused by DeclareSources against the broker",
	"topology.source_queues[].bindings[].routing_key":  "any routing key",
}

func badValues() []badValue {
	y := func(setting, doc string, want ...string) badValue {
		return badValue{setting: setting, yaml: doc, want: want}
	}
	e := func(setting, name, value string, want ...string) badValue {
		return badValue{setting: setting, env: map[string]string{name: value}, want: append([]string{name}, want...)}
	}
	src := func(field string) string {
		return "topology:\n  source_queues:\n    - name: orders\n      " + field + "\n"
	}
	return []badValue{
		// Connection settings: environment, YAML and flag.
		e("amqp_url", "DLQ_AMQP_URL", "http://rabbit:5672/", `"http://rabbit:5672/"`, "amqp:// or amqps://"),
		e("amqp_url", "DLQ_AMQP_URL", "amqp://", `"amqp://"`, "with a host"),
		e("amqp_url", "DLQ_AMQP_URL", "amqp://rabbit1/,amqp://u:secret@", `"amqp://u:xxxxx@"`, "with a host", "several separated by commas"),
		y("amqp_url", "amqp_url: 'rabbit:5672'\n", "amqp_url", `"rabbit:5672"`, "amqp:// or amqps://"),
		{setting: "--amqp-url", flags: Flags{AMQPURL: "ftp://x"}, want: []string{"--amqp-url", `"ftp://x"`, "amqp:// or amqps://"}},
		e("database_url", "DLQ_DATABASE_URL", "mysql://u:secret@db/dlq", "database_url", "mysql://u:xxxxx@db/dlq", "postgres:// or postgresql://"),
		e("database_url", "DLQ_DATABASE_URL", "dlq", `"dlq"`, "keyword=value"),
		y("database_url", "database_url: ' '\n", "database_url", "must be set"),
		{setting: "--database-url", flags: Flags{DatabaseURL: "http://db"}, want: []string{"--database-url", `"http://db"`, "postgres://"}},
		e("http_addr", "DLQ_HTTP_ADDR", "8080", `"8080"`, "host:port"),
		e("http_addr", "DLQ_HTTP_ADDR", "127.0.0.1:http", `"127.0.0.1:http"`, "0 to 65535"),
		y("http_addr", "http_addr: 127.0.0.1:99999\n", "http_addr", `"127.0.0.1:99999"`, "0 to 65535"),
		{setting: "--http-addr", flags: Flags{HTTPAddr: "localhost"}, want: []string{"--http-addr", `"localhost"`, "host:port"}},
		{setting: "--config", flags: Flags{ConfigFile: "/nonexistent/dlq.yaml"}, want: []string{"--config", "/nonexistent/dlq.yaml", "no such file"}},

		// Names.
		e("exchange", "DLQ_EXCHANGE", "amq.topic", `"amq.topic"`, "reserves"),
		y("exchange", "exchange: ''\n", "exchange", `""`, "must not be empty"),
		e("exchange", "DLQ_EXCHANGE", strings.Repeat("x", 256), "256 bytes", "at most 255"),
		e("queues", "DLQ_QUEUES", " , ", "must name at least one queue"),
		e("queues", "DLQ_QUEUES", "dlq,dlq", `"dlq" twice`),
		e("queues", "DLQ_QUEUES", "amq.dead", `"amq.dead"`, "reserves"),
		y("queues", "queues: dlq\n", "queues", `"dlq"`, "a list of strings"),
		y("queues", "queues: ['']\n", "queues", `""`, "must not be empty"),
		e("control_queue", "DLQ_CONTROL_QUEUE", "amq.ctl", `"amq.ctl"`, "reserves"),
		y("control_queue", "control_queue: ''\n", "control_queue", "must not be empty"),
		{setting: "control_queue", env: map[string]string{"DLQ_QUEUES": "dlq,dlq.control"}, want: []string{"DLQ_CONTROL_QUEUE", `"dlq.control"`, "also listed in queues"}},

		// Logging.
		e("log.level", "DLQ_LOG_LEVEL", "loud", `"loud"`, "debug, info, warn or error"),
		y("log.level", "log:\n  level: trace\n", "log.level", `"trace"`, "debug, info, warn or error"),
		e("log.format", "DLQ_LOG_FORMAT", "xml", `"xml"`, "text or json"),
		y("log.format", "log:\n  format: [json]\n", "log.format: a YAML list", "a string"),

		// Ingest.
		e("ingest.prefetch", "DLQ_PREFETCH", "lots", `"lots"`, "whole number", "ingest.prefetch"),
		e("ingest.prefetch", "DLQ_PREFETCH", "70000", "70000", "between 1 and 65535"),
		y("ingest.prefetch", "ingest:\n  prefetch: many\n", "line 2", "ingest.prefetch", `"many"`, "a whole number"),
		e("ingest.batch_size", "DLQ_BATCH_SIZE", "0", " 0 ", ">= 1"),
		e("ingest.batch_size", "DLQ_BATCH_SIZE", "5000", "5000", "must not exceed ingest.prefetch 1000"),
		y("ingest.batch_size", "ingest:\n  batch_size: ten\n", "ingest.batch_size", `"ten"`, "a whole number"),
		e("ingest.batch_bytes", "DLQ_BATCH_BYTES", "10", " 10 ", ">= 1024"),
		e("ingest.batch_bytes", "DLQ_BATCH_BYTES", "32MiB", `"32MiB"`, "whole number", "ingest.batch_bytes"),
		y("ingest.batch_bytes", "ingest:\n  batch_bytes: -5\n", "ingest.batch_bytes", "-5", ">= 1024"),
		e("ingest.linger", "DLQ_BATCH_LINGER", "soon", `"soon"`, "duration", "ingest.linger"),
		e("ingest.linger", "DLQ_BATCH_LINGER", "2m", "2m0s", "between 1ms and 1m"),
		e("ingest.linger", "DLQ_BATCH_LINGER", "0s", "0s", "between 1ms and 1m"),
		y("ingest.linger", "ingest:\n  linger: fast\n", "line 2", "ingest.linger", `"fast"`, "a duration (e.g. 250ms"),
		e("ingest.consumers", "DLQ_CONSUMERS", "100", "100", "between 1 and 64"),
		e("ingest.text_search", "DLQ_SEARCH_TEXT", "maybe", `"maybe"`, "true or false"),
		e("ingest.text_index_duty", "DLQ_TEXT_INDEX_DUTY", "0", " 0 ", "percentage from 1 to 100"),
		e("ingest.text_index_duty", "DLQ_TEXT_INDEX_DUTY", "half", `"half"`, "whole number", "ingest.text_index_duty"),
		y("ingest.text_index_duty", "ingest:\n  text_index_duty: 101\n", "ingest.text_index_duty", "101", "percentage from 1 to 100"),
		y("ingest.consumers", "ingest:\n  consumers: [1]\n", "ingest.consumers: a YAML list", "a whole number"),

		// Flags of the file itself.
		y("no_migrate", "no_migrate: maybe\n", "no_migrate", `"maybe"`, "true or false"),
		y("(unknown key)", "exchnage: x\n", `unknown key "exchnage"`, "at the top level", "exchange"),
		y("(unknown key)", "ingest:\n  prefetsh: 5\n", `unknown key "prefetsh"`, "under ingest", "prefetch"),
		y("(section type)", "ingest: 5\n", "ingest", `"5"`, "a mapping with the keys batch_bytes"),
		y("(syntax)", "queues: [\n", "not valid YAML"),

		// Topology.
		y("topology.declare_sources", "topology:\n  declare_sources: sometimes\n", "topology.declare_sources", `"sometimes"`, "true or false"),
		y("topology.source_queues[].name", "topology:\n  source_queues:\n    - name: ''\n", "source_queues[0].name is empty"),
		y("topology.source_queues[].name", "topology:\n  source_queues:\n    - name: dlq\n", `"dlq"`, "its own dead-letter queue"),
		y("topology.source_queues[].type", src("type: stream"), `"orders"`, `"stream"`, "quorum or classic"),
		y("topology.source_queues[].dead_letter_strategy", src("dead_letter_strategy: sometimes"), `"orders"`, `"sometimes"`, "at-least-once or at-most-once"),
		y("topology.source_queues[].delivery_limit", src("delivery_limit: -2"), `"orders"`, "delivery_limit -2", "must not be negative"),
		y("topology.source_queues[].delivery_limit", src("delivery_limit: often"), "topology.source_queues[0].delivery_limit", `"often"`, "a whole number"),
		y("topology.source_queues[].message_ttl", src("message_ttl: soon"), "topology.source_queues[0].message_ttl", `"soon"`, "a duration"),
		y("topology.source_queues[].message_ttl", src("message_ttl: -1m"), "message_ttl -1m0s", "must not be negative"),
		y("topology.source_queues[].max_length", src("max_length: -1"), "max_length -1", "must not be negative"),
		y("topology.source_queues[].max_length_bytes", src("max_length_bytes: -1"), "max_length_bytes -1", "must not be negative"),
		y("topology.source_queues[].overflow", src("overflow: drop-tail"), `"drop-tail"`, "drop-head, reject-publish or reject-publish-dlx"),
		y("topology.source_queues[].bindings[].exchange", src("bindings: [{routing_key: a}]"), `"orders"`, "bindings[0].exchange is empty"),

		// Cron.
		e("cron.summary", "DLQ_CRON_SUMMARY", "every minute", "cron.summary", `"every minute"`, "@every <duration>"),
		e("cron.summary", "DLQ_CRON_SUMMARY", "0 0 30 2 *", "cron.summary", `"0 0 30 2 *"`, "never fires"),
		e("api.rate_per_second", "DLQ_API_RATE", "NaN", "api.rate_per_second", "NaN", "positive number"),
		e("api.rate_per_second", "DLQ_API_RATE", "+Inf", "api.rate_per_second", "+Inf", "positive number"),
		e("cron.cleanup", "DLQ_CRON_CLEANUP", "@every 1ms", "cron.cleanup", `"@every 1ms"`, "at least 10ms"),
		y("cron.capacity", "cron:\n  capacity: '61 * * * *'\n", "cron.capacity", `"61 * * * *"`, "cron expression"),
		e("cron.capacity", "DLQ_CRON_CAPACITY", "TZ=UTC", "cron.capacity", `"TZ=UTC"`, "cron expression"),
		e("cron.alerts", "DLQ_CRON_ALERTS", "@sometimes", "cron.alerts", `"@sometimes"`, "@hourly"),
		e("cron.reconcile_interval", "DLQ_CRON_RECONCILE_INTERVAL", "0s", "cron.reconcile_interval", "0s", "> 0"),
		e("cron.reconcile_interval", "DLQ_CRON_RECONCILE_INTERVAL", "hourly", `"hourly"`, "duration"),
		e("cron.lease_ttl", "DLQ_CRON_LEASE_TTL", "-1s", "cron.lease_ttl", "-1s", ">= 0"),
		e("cron.disabled", "DLQ_CRON_DISABLED", "maybe", `"maybe"`, "true or false"),
		y("cron.disabled", "cron:\n  disabled: 2\n", "cron.disabled", `"2"`, "true or false"),

		// Cleanup.
		e("cleanup.retention", "DLQ_RETENTION_REPLAYED", "a month", `"a month"`, "duration"),
		e("cleanup.retention", "DLQ_RETENTION_ACKNOWLEDGED", "-1h", "cleanup.retention.acknowledged", "-1h0m0s", ">= 0"),
		y("cleanup.retention", "cleanup:\n  retention:\n    pending: 24h\n", "cleanup.retention.pending", "only replayed and acknowledged"),
		e("cleanup.batch_size", "DLQ_CLEANUP_BATCH_SIZE", "0", "cleanup.batch_size", " 0 ", "between 1 and 100000"),
		e("cleanup.batch_timeout", "DLQ_CLEANUP_BATCH_TIMEOUT", "0s", "cleanup.batch_timeout", "0s", "> 0"),
		e("cleanup.pause", "DLQ_CLEANUP_PAUSE", "-1ms", "cleanup.pause", "-1ms", ">= 0"),
		e("cleanup.max_messages", "DLQ_MAX_MESSAGES", "-5", "cleanup.max_messages", "-5", ">= 0"),
		e("cleanup.max_bytes", "DLQ_MAX_BYTES", "1GB", `"1GB"`, "whole number"),
		e("cleanup.allow_evict_pending", "DLQ_ALLOW_EVICT_PENDING", "perhaps", `"perhaps"`, "true or false"),
		e("cleanup.control_command_ttl", "DLQ_CONTROL_COMMAND_TTL", "-1h", "cleanup.control_command_ttl", "-1h0m0s", ">= 0"),
		e("cleanup.replay_task_ttl", "DLQ_REPLAY_TASK_TTL", "-1h", "cleanup.replay_task_ttl", "-1h0m0s", ">= 0"),
		e("cleanup.job_run_ttl", "DLQ_JOB_RUN_TTL", "-1h", "cleanup.job_run_ttl", "-1h0m0s", ">= 0"),
		e("cleanup.audit_ttl", "DLQ_AUDIT_TTL", "forever", `"forever"`, "duration"),
		e("cleanup.ingest_inflight_ttl", "DLQ_INGEST_INFLIGHT_TTL", "30s", "cleanup.ingest_inflight_ttl", "30s", "at least 1m0s"),

		// The runbook alerts link to.
		e("alerts.runbook_base_url", "DLQ_RUNBOOK_BASE_URL", "docs/RUNBOOK.md", "alerts.runbook_base_url", `"docs/RUNBOOK.md"`, "http:// or https://"),
		e("alerts.runbook_base_url", "DLQ_RUNBOOK_BASE_URL", "https://wiki.example/dlq#top", "alerts.runbook_base_url", "#fragment"),

		// Alerts receivers from the environment.
		// Receiver URLs carry secrets (a Slack hook's path is its token), so
		// the alerts package does not quote a value it cannot parse.
		e("alerts.webhooks", "DLQ_ALERT_WEBHOOK_URL", "not a url", "alerts.webhooks[0].url", "http:// or https://"),
		e("alerts.slack", "DLQ_SLACK_WEBHOOK_URL", "slack", "alerts.slack[0].url", "http:// or https://"),
		e("alerts.alertmanagers", "DLQ_ALERTMANAGER_URL", "ftp://am", "alerts.alertmanagers[0].url", "ftp://am"),

		// Management API.
		e("management.url", "DLQ_MANAGEMENT_URL", "amqp://rabbit:15672", `"amqp://rabbit:15672"`, "http:// or https://"),
		y("management.url", "management:\n  url: 'http://:secret@'\n", "management.url", "http:// or https://"),
		e("management.interval", "DLQ_MANAGEMENT_INTERVAL", "10ms", "management.interval", "10ms", "between 1s and 24h"),
		e("management.interval", "DLQ_MANAGEMENT_INTERVAL", "often", `"often"`, "duration", "management.interval"),

		// Web console.
		e("ui.enabled", "DLQ_UI", "off", "ui.enabled", `"off"`, "true or false"),
		y("ui.enabled", "ui:\n  enabled: maybe\n", "ui.enabled", `"maybe"`, "true or false"),
		e("ui.session_ttl", "DLQ_UI_SESSION_TTL", "10s", "ui.session_ttl", "10s", "between 1m0s and 720h0m0s"),
		e("ui.session_ttl", "DLQ_UI_SESSION_TTL", "a day", `"a day"`, "duration"),

		// Recovery: categories and policies.
		e("cron.categories", "DLQ_CRON_CATEGORIES", "@often", "cron.categories", `"@often"`, "@hourly"),
		e("cron.policies", "DLQ_CRON_POLICIES", "@every 1ms", "cron.policies", `"@every 1ms"`, "at least 10ms"),
		e("cron.backfills", "DLQ_CRON_BACKFILLS", "every minute", "cron.backfills", `"every minute"`, "@every <duration>"),
		e("cron.statistics", "DLQ_CRON_STATISTICS", "each minute", "cron.statistics", `"each minute"`, "@every <duration>"),
		e("recovery.categories.default_rules", "DLQ_CATEGORY_DEFAULT_RULES", "some", "recovery.categories.default_rules", `"some"`, "true or false"),
		y("recovery.categories.rules[].name", rule("category: permanent"), "recovery.categories.rules[0].name: required"),
		y("recovery.categories.rules[].name", rule("name: timeout, category: permanent"), `default rule "timeout"`, "used by an earlier rule"),
		y("recovery.categories.rules[].category", rule("name: x, category: flaky"), "recovery.categories.rules[0].category", `"flaky"`, "transient, permanent, unknown"),
		y("recovery.categories.rules[].reasons", rule("name: x, category: permanent, reasons: ['']"), "recovery.categories.rules[0].reasons[0]", "empty"),
		y("recovery.categories.rules[].queues", rule("name: x, category: permanent, queues: ['']"), "recovery.categories.rules[0].queues[0]", "empty"),
		y("recovery.categories.rules[].failure", rule("name: x, category: permanent, failure: '(('"), "recovery.categories.rules[0].failure", "not a regular expression"),
		y("recovery.categories.rules[].failure_type", rule("name: x, category: permanent, failure_type: '[a'"), "recovery.categories.rules[0].failure_type", "not a regular expression"),
		y("recovery.categories.rules[].failure_message", rule("name: x, category: permanent, failure_message: '(('"), "recovery.categories.rules[0].failure_message", "not a regular expression"),
		y("recovery.categories.rules[].headers", rule("name: x, category: permanent, headers: {x-code: '*'}"), "recovery.categories.rules[0].headers.x-code", "not a regular expression"),
		y("recovery.policies[].name", "recovery:\n  policies:\n    - name: 'a b'\n", "recovery.policies[0].name", `"a b"`),
		y("recovery.policies[].name", "recovery:\n  policies:\n    - name: a\n    - name: a\n", "recovery.policies[1].name", "unique"),
		y("recovery.policies[].categories", "recovery:\n  policies:\n    - {name: a, categories: [flaky]}\n", "recovery.policies[0].categories[0]", `"flaky"`),
		y("recovery.policies[].groups", "recovery:\n  policies:\n    - {name: a, groups: [xyz]}\n", "recovery.policies[0].groups[0]", "16 hex digits"),
		y("recovery.policies[].first_delay", "recovery:\n  policies:\n    - {name: a, first_delay: soon}\n", "first_delay", `"soon"`, "duration"),
		y("recovery.policies[].backoff_factor", "recovery:\n  policies:\n    - {name: a, backoff_factor: 0.5}\n", "recovery.policies[0].backoff_factor", "between 1"),
		y("recovery.policies[].max_delay", "recovery:\n  policies:\n    - {name: a, first_delay: 1h, max_delay: 1m}\n", "recovery.policies[0].max_delay", "at least first_delay"),
		y("recovery.policies[].jitter", "recovery:\n  policies:\n    - {name: a, jitter: 2}\n", "recovery.policies[0].jitter", "between 0 and 1"),
		y("recovery.policies[].max_attempts", "recovery:\n  policies:\n    - {name: a, max_attempts: -1}\n", "recovery.policies[0].max_attempts", "between 1 and 100"),
		y("recovery.policies[].rate_per_second", "recovery:\n  policies:\n    - {name: a, rate_per_second: -1}\n", "recovery.policies[0].rate_per_second", "between 0"),
		y("recovery.policies[].canary.count", "recovery:\n  policies:\n    - {name: a, canary: {count: 0, wait_seconds: 5}}\n", "recovery.policies[0].canary", "count 0"),
		y("recovery.policies[].canary.wait_seconds", "recovery:\n  policies:\n    - {name: a, canary: {count: 1, wait_seconds: 0}}\n", "recovery.policies[0].canary", "wait_seconds 0"),
		y("recovery.policies[].queues", "recovery:\n  policies:\n    - {name: a, queues: ['']}\n", "recovery.policies[0].queues[0]", "empty"),
		y("recovery.policies[].reasons", "recovery:\n  policies:\n    - {name: a, reasons: ['']}\n", "recovery.policies[0].reasons[0]", "empty"),
		y("recovery.policies[].dry_run", "recovery:\n  policies:\n    - {name: a, dry_run: perhaps}\n", "dry_run", `"perhaps"`, "true or false"),
		y("recovery.policies[].on_unknown", "recovery:\n  policies:\n    - {name: a, on_unknown: drop}\n", "recovery.policies[0].on_unknown", `"drop"`, "retry or hold"),
		e("replay.on_unknown", "DLQ_REPLAY_ON_UNKNOWN", "drop", "replay.on_unknown", `"drop"`, "retry", "hold"),
		y("replay.unknown_retries", "replay:\n  unknown_retries: 0\n", "replay.unknown_retries", "0", "between 1 and 10"),
	}
}

// rule is a YAML file with one category rule, given inline.
func rule(fields string) string {
	return "recovery:\n  categories:\n    rules:\n      - {" + fields + "}\n"
}

func loadBad(t *testing.T, c badValue) error {
	t.Helper()
	f := c.flags
	if c.yaml != "" {
		f.ConfigFile = filepath.Join(t.TempDir(), "dlq.yaml")
		require.NoError(t, os.WriteFile(f.ConfigFile, []byte(c.yaml), 0o600))
	}
	_, err := Load(f, func(k string) string { return c.env[k] })
	return err
}

// TestEveryBadValueIsExplained: each wrong value is refused with an error
// naming the setting, quoting the value and saying what is valid.
func TestEveryBadValueIsExplained(t *testing.T) {
	t.Parallel()
	for _, c := range badValues() {
		name := c.setting + "/" + strings.Join(slices.Sorted(mapKeys(c.env)), ",")
		if c.yaml != "" {
			name += "/yaml"
		}
		t.Run(name, func(t *testing.T) {
			err := loadBad(t, c)
			require.Error(t, err, "env %v, yaml %q, flags %+v", c.env, c.yaml, c.flags)
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
			require.NotContains(t, err.Error(), "secret", "passwords are never quoted")
		})
	}
}

// TestBadValuesCoverEverySetting: every environment variable and every YAML
// key of the sections this file covers has a wrong value above, or is
// listed in anyValue. The api, replay and security sections have their
// own tests (section_api_test.go, section_replay_test.go,
// section_security_test.go), and the alerts package checks its own YAML.
func TestBadValuesCoverEverySetting(t *testing.T) {
	t.Parallel()
	covered := map[string]bool{}
	for _, c := range badValues() {
		covered[c.setting] = true
		for k := range c.env {
			covered[k] = true
		}
	}
	for k := range anyValue {
		covered[k] = true
	}
	skip := map[string]bool{}
	for _, v := range append(append(apiEnvVars(), replayEnvVars()...), securityEnvVars()...) {
		skip[v.name] = true
	}
	for _, v := range envVars() {
		if !skip[v.name] {
			require.True(t, covered[v.name], "environment variable %s has no bad-value case", v.name)
		}
	}
	for _, key := range yamlLeaves(reflect.TypeFor[Config](), "") {
		root, _, _ := strings.Cut(key, ".")
		if root == "api" || root == "replay" || root == "alerts" || root == "encryption" || root == "redaction" || root == "tls" || root == "amqp_tls" {
			continue
		}
		require.True(t, covered[key], "YAML key %s has no bad-value case", key)
	}
	for _, flag := range []string{"--config", "--amqp-url", "--database-url", "--http-addr"} {
		require.True(t, covered[flag], "flag %s has no bad-value case", flag)
	}
}

// yamlLeaves lists the YAML keys under t that hold values (maps count as
// one value), with "[]" marking list elements.
func yamlLeaves(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[Duration]() || t == reflect.TypeFor[time.Duration]() {
		return []string{prefix}
	}
	switch t.Kind() {
	case reflect.Struct:
		var out []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if strings.Contains(opts, "inline") {
				out = append(out, yamlLeaves(f.Type, prefix)...)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			out = append(out, yamlLeaves(f.Type, p)...)
		}
		return out
	case reflect.Slice:
		if e := t.Elem(); e.Kind() == reflect.Struct {
			return yamlLeaves(e, prefix+"[]")
		}
	}
	return []string{prefix}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
