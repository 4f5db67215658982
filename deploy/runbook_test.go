package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/config"
)

// docs/RUNBOOK.md: every alert has its section, and what the runbook tells
// people to use exists in the code.

var (
	anchorTag   = regexp.MustCompile(`<a id="([^"]+)"></a>`)
	anchorLink  = regexp.MustCompile(`\]\(#([^)]+)\)`)
	apiPathRef  = regexp.MustCompile(`/api/v1/[a-z/<>{}_]*[a-z>}]`)
	configKeyRe = regexp.MustCompile("`((?:alerts|cleanup|cron|replay|api|management|ingest|log|topology)\\.[a-z_.*]+)")
)

// runbookAnchors returns the explicit anchors of docs/RUNBOOK.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range anchorTag.FindAllStringSubmatch(string(readRepoFile(t, "docs/RUNBOOK.md")), -1) {
		require.False(t, out[m[1]], "anchor %s twice in docs/RUNBOOK.md", m[1])
		out[m[1]] = true
	}
	return out
}

// TestRunbookSections: every kind of dlq rule and every troubleshooting
// topic has a section, each anchor opens one, and every link inside lands.
func TestRunbookSections(t *testing.T) {
	t.Parallel()
	text := string(readRepoFile(t, "docs/RUNBOOK.md"))
	anchors := runbookAnchors(t)

	// dlq's own alerts link by kind.
	for _, k := range alerts.Kinds() {
		require.True(t, anchors[alerts.RunbookAnchor(k)], "docs/RUNBOOK.md has no section for rules of kind %s", k)
	}
	for _, a := range []string{"trouble-not-arriving", "trouble-replay-unroutable", "trouble-postgres-full",
		"trouble-lease-stuck", "trouble-summary-repaired", "trouble-twins"} {
		require.True(t, anchors[a], "docs/RUNBOOK.md has no troubleshooting section %s", a)
	}
	// Each anchor opens a section: only anchors and blank lines between it
	// and a heading.
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if !anchorTag.MatchString(l) {
			continue
		}
		j := i + 1
		for j < len(lines) && (strings.TrimSpace(lines[j]) == "" || anchorTag.MatchString(lines[j])) {
			j++
		}
		require.Less(t, j, len(lines))
		require.True(t, strings.HasPrefix(lines[j], "#"), "anchor on line %d is not followed by a heading", i+1)
	}
	for _, m := range anchorLink.FindAllStringSubmatch(text, -1) {
		require.True(t, anchors[m[1]], "docs/RUNBOOK.md links to #%s, which it does not have", m[1])
	}
}

// TestRunbookMatchesTheCode: what the runbook tells people to use exists:
// API routes, metrics, settings, commands and their flags.
func TestRunbookMatchesTheCode(t *testing.T) {
	t.Parallel()
	text := string(readRepoFile(t, "docs/RUNBOOK.md"))
	var patterns []*regexp.Regexp
	for _, r := range api.Routes() {
		p := regexp.QuoteMeta(r.Path)
		p = regexp.MustCompile(`\\\{[a-z]+\\\}`).ReplaceAllString(p, `[^/]+`)
		patterns = append(patterns, regexp.MustCompile("^"+p+"$"))
	}
	for _, ref := range apiPathRef.FindAllString(text, -1) {
		require.True(t, slices.ContainsFunc(patterns, func(p *regexp.Regexp) bool { return p.MatchString(ref) }),
			"docs/RUNBOOK.md names %s, which is no API route", ref)
	}
	defined := metricsInCode(t)
	for _, m := range queriedMetric.FindAllString(text, -1) {
		require.True(t, isDefinedMetric(defined, m), "docs/RUNBOOK.md names the metric %s, which dlq does not define", m)
	}
	for _, m := range configKeyRe.FindAllStringSubmatch(text, -1) {
		key := strings.TrimSuffix(m[1], ".")
		require.True(t, configKeyExists(reflect.TypeFor[config.Config](), strings.Split(key, ".")),
			"docs/RUNBOOK.md names the setting %s, which dlq does not have", key)
	}

	cmds, flags := cliNames(t)
	for _, code := range codeIn(text) {
		code, _, _ = strings.Cut(code, " # ")
		for _, m := range cliCall.FindAllStringSubmatch(code, -1) {
			require.True(t, cmds[m[1]], "docs/RUNBOOK.md runs `dlq %s`, which is no command", m[1])
			for _, f := range cliFlag.FindAllStringSubmatch(m[2], -1) {
				require.True(t, flags[f[1]], "docs/RUNBOOK.md runs `dlq %s` with --%s, which no command takes", m[1], f[1])
			}
		}
	}
}

var (
	cliCall      = regexp.MustCompile(`(?:^|[\s(])dlq ([a-z]+)((?: +[^ |;]+)*)`)
	cliFlag      = regexp.MustCompile(`(?:^|\s)--([a-z][a-z-]*)`)
	cliCommandRe = regexp.MustCompile(`\{"([a-z-]+)", "[^"]*", (?:cmd|cli\.)[A-Za-z]+\}`)
	cliFlagRe    = regexp.MustCompile(`fs\.(?:[A-Za-z0-9]+Var|Func|String|Bool|Int|Duration)\(\s*(?:&?[\w.]+,\s*)?"([a-z][a-z-]*)"`)
)

// cliNames returns dlq's subcommands (the table in cmd/dlq/commands.go)
// and every flag name its commands register (cmd/dlq and internal/cli).
func cliNames(t *testing.T) (cmds, flags map[string]bool) {
	t.Helper()
	cmds = map[string]bool{"help": true}
	for _, m := range cliCommandRe.FindAllStringSubmatch(string(readRepoFile(t, "cmd/dlq/commands.go")), -1) {
		cmds[m[1]] = true
	}
	require.True(t, cmds["serve"] && cmds["replay"] && cmds["ls"], "the scan for commands found too little: %v", cmds)
	flags = map[string]bool{"help": true}
	files, err := filepath.Glob(repoPath("cmd/dlq/*.go"))
	require.NoError(t, err)
	more, err := filepath.Glob(repoPath("internal/cli/*.go"))
	require.NoError(t, err)
	files = append(files, more...)
	files = append(files, repoPath("config/config.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range cliFlagRe.FindAllStringSubmatch(string(b), -1) {
			flags[m[1]] = true
		}
	}
	require.True(t, flags["config"] && flags["json"] && flags["source-queue"], "the scan for flags found too little")
	return cmds, flags
}

// codeIn returns the code of a Markdown text: fenced blocks, line by line,
// and inline code spans.
func codeIn(text string) []string {
	var out []string
	for i, part := range strings.Split(text, "```") {
		if i%2 == 1 {
			out = append(out, strings.Split(part, "\n")...)
			continue
		}
		for _, m := range inlineCode.FindAllStringSubmatch(part, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

// configKeyExists follows a dotted YAML key through the configuration's
// types; a map takes any key (written * or a name).
func configKeyExists(t reflect.Type, key []string) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if len(key) == 0 {
		return true
	}
	switch t.Kind() {
	case reflect.Map:
		return configKeyExists(t.Elem(), key[1:])
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if strings.Contains(opts, "inline") {
				if configKeyExists(f.Type, key) {
					return true
				}
				continue
			}
			if name == key[0] && f.IsExported() {
				return configKeyExists(f.Type, key[1:])
			}
		}
	}
	return false
}

func TestPrometheusRulesLinkTheRunbook(t *testing.T) {
	t.Parallel()
	anchors := runbookAnchors(t)
	defined := metricsInCode(t)
	var rf ruleFile
	decodeYAML(t, "deploy/prometheus/alerts.yml", &rf)
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			want := alerts.RunbookBaseURLDefault + "#" + strings.ToLower(r.Alert)
			require.Equal(t, want, r.Annotations["runbook_url"], "alert %s", r.Alert)
			require.True(t, anchors[strings.ToLower(r.Alert)], "docs/RUNBOOK.md has no section for %s", r.Alert)
			for _, m := range queriedMetric.FindAllString(r.Expr, -1) {
				require.True(t, isDefinedMetric(defined, m), "alert %s queries %s, which dlq does not define", r.Alert, m)
			}
		}
	}
	require.GreaterOrEqual(t, n, 14)
}
