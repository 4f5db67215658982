package deploy

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"

	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var (
	metricDefRE = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(dlq_[a-z0-9_]+)"`)
	metricUseRE = regexp.MustCompile(`\bdlq_[a-z0-9_]+\b`)
)

// exportedMetrics collects every metric name dlq's code defines (Name: in
// the options of a collector, or prometheus.NewDesc), from the module's
// non-test sources: the one place the names live.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "tmp" || d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricDefRE.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	return names
}

// known reports whether a name used in a query is exported, allowing the
// series a histogram adds.
func known(names map[string]bool, used string) bool {
	if names[used] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(used, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

// storeOne stores one pending message, so the summary gauges have a series.
func storeOne(t *testing.T, st *store.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now()
	b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: []store.NewMessage{{
		SourceQueue: "q", DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1,
		Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{}`), Body: []byte("x"),
		FirstFailedAt: now, FailedAt: now,
	}}}
	_, err := st.IngestBatch(ctx, b)
	require.NoError(t, err)
	require.NoError(t, st.ConfirmBatches(ctx, []int64{b.ID}))
}

// TestDeployAssets checks prometheus/alerts.yml and grafana/dlq.json: both
// parse, every metric they query is one dlq exports, and, where promtool is
// installed, the rules pass promtool's check and their unit tests
// (alerts_test.yml).
func TestDeployAssets(t *testing.T) {
	t.Parallel()
	names := exportedMetrics(t)

	// The scan must see what a live registry holds; check it against the
	// cron service's own metrics (summary gauges included).
	st, _ := dlqtest.Store(t)
	reg := prometheus.NewRegistry()
	svc, err := cron.New(cron.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg, Disabled: true,
		Cleanup: cleanup.Config{Capacity: cleanup.Capacity{MaxMessages: 10}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	storeOne(t, st)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	live := 0
	for _, mf := range mfs {
		require.True(t, names[mf.GetName()], "metric %s is registered but the source scan missed it", mf.GetName())
		live++
	}
	require.GreaterOrEqual(t, live, 8)
	for _, contract := range []string{
		"dlq_messages_ingested_total", "dlq_messages_duplicate_total", "dlq_ingest_batch_seconds",
		"dlq_dead_messages", "dlq_oldest_pending_age_seconds", "dlq_replays_total", "dlq_cleanup_deleted_total",
		"dlq_capacity_evicted_total", "dlq_alerts_firing", "dlq_control_commands_total", "dlq_up",
	} {
		require.True(t, names[contract], "the contract's metric %s is not defined anywhere", contract)
	}

	// Prometheus rules.
	raw, err := os.ReadFile("prometheus/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Expr string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	require.NotEmpty(t, rules.Groups)
	alertNames := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			require.False(t, alertNames[r.Alert], "alert %s defined twice", r.Alert)
			alertNames[r.Alert] = true
			require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			used := metricUseRE.FindAllString(r.Expr, -1)
			require.NotEmpty(t, used, "alert %s queries no dlq metric", r.Alert)
			for _, u := range used {
				require.True(t, known(names, u), "alert %s queries %s, which dlq does not export", r.Alert, u)
			}
		}
	}

	// Grafana dashboard.
	raw, err = os.ReadFile("grafana/dlq.json")
	require.NoError(t, err)
	var dash struct {
		Title  string
		UID    string
		Panels []struct {
			ID      int
			Type    string
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name       string
				Definition string
			}
		}
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.UID)
	var exprs []string
	ids := map[int]bool{}
	queried := 0
	for _, p := range dash.Panels {
		require.False(t, ids[p.ID], "panel id %d used twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
		queried++
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	require.GreaterOrEqual(t, queried, 10)
	var usedAll []string
	for _, e := range exprs {
		for _, u := range metricUseRE.FindAllString(e, -1) {
			require.True(t, known(names, u), "dashboard query %q uses %s, which dlq does not export", e, u)
			usedAll = append(usedAll, u)
		}
	}
	for _, want := range []string{"dlq_dead_messages", "dlq_oldest_pending_age_seconds", "dlq_job_runs_total", "dlq_capacity_evicted_total"} {
		require.True(t, slices.Contains(usedAll, want), "the dashboard does not show %s", want)
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed: rules checked by the parser above only")
		return
	}
	out, err := exec.Command(promtool, "check", "rules", "prometheus/alerts.yml").CombinedOutput()
	require.NoError(t, err, "promtool check rules:\n%s", out)
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	cmd.Dir = "prometheus"
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", out)
}

// docAlertOn finds the docs' advice "Alert on `<expression>`".
var docAlertOn = regexp.MustCompile("(?i)alert on\\s+`([^`]+)`")

// TestDocumentedAlertsAreRules: an expression the docs tell operators to
// alert on is a rule of prometheus/alerts.yml, and the doc that gives the
// advice names that rule, so following it and loading alerts.yml are one
// thing, not two to keep in step.
func TestDocumentedAlertsAreRules(t *testing.T) {
	t.Parallel()
	var rf ruleFile
	decodeYAML(t, "deploy/prometheus/alerts.yml", &rf)
	byExpr := map[string]string{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			byExpr[strings.Join(strings.Fields(r.Expr), " ")] = r.Alert
		}
	}
	docs, err := filepath.Glob(repoPath("docs/*.md"))
	require.NoError(t, err)
	advised := 0
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range docAlertOn.FindAllStringSubmatch(string(text), -1) {
			advised++
			expr := strings.Join(strings.Fields(m[1]), " ")
			rule, ok := byExpr[expr]
			require.True(t, ok, "%s advises alerting on %s, which no rule of deploy/prometheus/alerts.yml does", filepath.Base(doc), expr)
			require.True(t, strings.Contains(string(text), "`"+rule+"`"), "%s advises alerting on %s without naming its rule %s", filepath.Base(doc), expr, rule)
		}
	}
	require.Positive(t, advised, "the scan found no advice in docs/*.md")
}
