package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/dlq/dlq/category"
)

// The configuration docs are held to the code: README.md's table and
// docs/CONFIGURATION.md must name every environment variable, name none
// that does not exist, and give the real defaults.

var envRe = regexp.MustCompile(`DLQ_[A-Z0-9_]*[A-Z0-9]`)

// notSettings are DLQ_* variables the docs mention that are not dlq's
// configuration: the CLI's, the tests', the scripts', the build's and
// docker-compose.yml's.
func notSetting(name string) bool {
	switch {
	case name == "DLQ_URL", name == "DLQ_TOKEN", name == "DLQ_TOKEN_FILE", name == "DLQ_CA_FILE", name == "DLQ_COMMIT", name == "DLQ_PUBLISH_ADDR",
		strings.HasPrefix(name, "DLQ_TEST_"), strings.HasPrefix(name, "DLQ_SERVICES_"):
		return true
	}
	return false
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestDocsNameEverySetting(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, v := range envVars() {
		known[v.name] = true
	}
	for _, doc := range []string{"../README.md", "../docs/CONFIGURATION.md"} {
		text := readDoc(t, doc)
		for _, v := range envVars() {
			require.Contains(t, text, v.name, "%s does not mention %s", doc, v.name)
		}
		for _, name := range envRe.FindAllString(text, -1) {
			require.True(t, known[name] || notSetting(name), "%s mentions %s, which dlq does not read", doc, name)
		}
	}
}

// TestConfigurationDocDefaults decodes the YAML of docs/CONFIGURATION.md:
// every key in it must exist, and where it shows a section's defaults
// they must be the code's.
func TestConfigurationDocDefaults(t *testing.T) {
	t.Parallel()
	text := readDoc(t, "../docs/CONFIGURATION.md")
	start := strings.Index(text, "```yaml\n")
	require.GreaterOrEqual(t, start, 0)
	end := strings.Index(text[start+8:], "```")
	require.GreaterOrEqual(t, end, 0)
	var doc Config
	dec := yaml.NewDecoder(strings.NewReader(text[start+8 : start+8+end]))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&doc), "docs/CONFIGURATION.md names a key dlq does not know")

	def := Default()
	require.Equal(t, def.AMQPURL, doc.AMQPURL)
	require.Equal(t, def.DatabaseURL, doc.DatabaseURL)
	require.Equal(t, def.HTTPAddr, doc.HTTPAddr)
	require.Equal(t, def.Exchange, doc.Exchange)
	require.Equal(t, def.Queues, doc.Queues)
	require.Equal(t, def.ControlQueue, doc.ControlQueue)
	require.Equal(t, def.Log, doc.Log)
	require.Equal(t, def.Ingest, doc.Ingest)
	require.Equal(t, def.Replay, doc.Replay)
	require.Equal(t, def.Cleanup, doc.Cleanup)
	require.Equal(t, def.Management, doc.Management)
	require.Equal(t, def.UI, doc.UI)
	// The cron block leaves lease_ttl, instance and disabled to a comment.
	cron := def.Cron
	cron.LeaseTTL, cron.Instance, cron.Disabled = doc.Cron.LeaseTTL, doc.Cron.Instance, doc.Cron.Disabled
	require.Equal(t, cron, doc.Cron)
	require.Equal(t, def.Recovery.Categories.DefaultRules, doc.Recovery.Categories.DefaultRules)
	require.Empty(t, doc.Recovery.Categories.Rules)
	require.Empty(t, doc.Recovery.Policies)
}

// TestConfigurationDocRecoveryExample: the example of rules and policies
// in docs/CONFIGURATION.md is a valid configuration, and its comments give
// the policies' real defaults.
func TestConfigurationDocRecoveryExample(t *testing.T) {
	t.Parallel()
	text := readDoc(t, "../docs/CONFIGURATION.md")
	_, after, ok := strings.Cut(text, "## Failure categories and replay policies")
	require.True(t, ok)
	start := strings.Index(after, "```yaml\n")
	require.GreaterOrEqual(t, start, 0)
	end := strings.Index(after[start+8:], "```")
	require.GreaterOrEqual(t, end, 0)
	block := after[start+8 : start+8+end]
	c := Default()
	dec := yaml.NewDecoder(strings.NewReader(block))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&c))
	require.NoError(t, c.Validate())
	require.Len(t, c.Recovery.Categories.Rules, 3)
	require.Len(t, c.Recovery.Policies, 1)
	rules, err := c.CategoryRules()
	require.NoError(t, err)
	got, _ := rules.Match(category.Fields{SourceQueue: "billing", FailureMessage: "Card declined: timeout at the bank"})
	require.Equal(t, category.Permanent, got)
	for _, d := range []string{"categories: [transient]    # default [transient]", "first_delay: 1m            # default 1m",
		"backoff_factor: 5          # default 2", "max_delay: 1h              # default 1h", "max_attempts: 3            # default 3"} {
		require.Contains(t, block, d)
	}
	var zero Policy
	d := zero.WithDefaults()
	require.Equal(t, []string{category.Transient}, d.Categories)
	require.Equal(t, Duration(time.Minute), d.FirstDelay)
	require.Equal(t, 2.0, d.BackoffFactor)
	require.Equal(t, Duration(time.Hour), d.MaxDelay)
	require.Equal(t, 3, d.MaxAttempts)
}

var (
	rowRe  = regexp.MustCompile("^\\| (`DLQ_[^|]*) \\| ([^|]*) \\|")
	tickRe = regexp.MustCompile("^`([^`]*)`")
)

// splitTop splits s on ", " outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, last := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 && i+1 < len(s) && s[i+1] == ' ' {
				out = append(out, s[last:i])
				last = i + 2
			}
		}
	}
	return append(out, s[last:])
}

// TestReadmeDefaults: each default in README.md's table, set as its
// variable, leaves the configuration exactly as it is by default.
func TestReadmeDefaults(t *testing.T) {
	t.Parallel()
	def, err := Load(Flags{}, func(string) string { return "" })
	require.NoError(t, err)
	checked := 0
	for _, line := range strings.Split(readDoc(t, "../README.md"), "\n") {
		m := rowRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		vars := splitTop(m[1])
		defaults := splitTop(strings.TrimSpace(m[2]))
		require.Len(t, defaults, len(vars), "README row %q: one default per variable", line)
		for i, v := range vars {
			name := strings.Trim(v, "`")
			d := tickRe.FindStringSubmatch(defaults[i])
			if d == nil {
				continue // "(none)": unset by default
			}
			c, err := Load(Flags{}, func(k string) string {
				if k == name {
					return d[1]
				}
				return ""
			})
			require.NoError(t, err, "README gives %s the default %q", name, d[1])
			require.True(t, reflect.DeepEqual(def, c), "README gives %s the default %q, which is not the code's", name, d[1])
			checked++
		}
	}
	require.Greater(t, checked, 40, "the README table was found and read")
	require.True(t, slices.ContainsFunc(envVars(), func(v envVar) bool { return v.name == "DLQ_AMQP_URL" }))
}

// TestConfigurationDocAlertKeys: the example of every alert rule and
// receiver key in docs/CONFIGURATION.md names only keys dlq knows, and is
// a valid configuration.
func TestConfigurationDocAlertKeys(t *testing.T) {
	t.Parallel()
	text := readDoc(t, "../docs/CONFIGURATION.md")
	at := strings.Index(text, "name: orders_backlog")
	require.Positive(t, at, "the alert keys' example")
	start := strings.LastIndex(text[:at], "```yaml\n") + len("```yaml\n")
	end := start + strings.Index(text[start:], "```")
	var doc Config
	dec := yaml.NewDecoder(strings.NewReader(text[start:end]))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&doc), "docs/CONFIGURATION.md names an alert key dlq does not know")
	c := Default()
	c.Alerts = doc.Alerts
	require.NoError(t, c.Validate())
	require.Len(t, doc.Alerts.Slack, 1)
	require.Equal(t, ":rotating_light:", doc.Alerts.Slack[0].IconEmoji)
}
