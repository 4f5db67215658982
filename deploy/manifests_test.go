package deploy

import (
	"encoding/json"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/config"
)

// The deploy files are held to each other and to the code: each parses, the
// files the compose file mounts exist, the ports agree (compose, Kubernetes,
// Prometheus, Grafana and dlq's defaults), the metrics the rules and the
// dashboard query are ones dlq defines, and every runbook_url lands on a
// section of docs/RUNBOOK.md. promtool and amtool check what they know,
// where installed (scripts/services.sh installs them). This file holds the
// compose, Prometheus, Alertmanager and Grafana checks and what they share;
// kubernetes_test.go and runbook_test.go the rest.

// repo is the repository's root, seen from this package's directory.
const repo = ".."

func repoPath(p string) string { return filepath.Join(repo, filepath.FromSlash(p)) }

func readRepoFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(repoPath(p))
	require.NoError(t, err)
	return b
}

func decodeYAML(t *testing.T, p string, v any) {
	t.Helper()
	require.NoError(t, yaml.Unmarshal(readRepoFile(t, p), v), "%s does not parse", p)
}

// ---------------------------------------------------------------------------
// docker-compose.yml

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Profiles    []string          `yaml:"profiles"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
}

// mount is a bind mount (source set, relative to the repository) or a
// named volume.
type mount struct{ source, volume, target string }

func (s composeService) mounts() []mount {
	var out []mount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		m := mount{target: parts[1]}
		if strings.HasPrefix(parts[0], "./") {
			m.source = strings.TrimPrefix(parts[0], "./")
		} else {
			m.volume = parts[0]
		}
		out = append(out, m)
	}
	return out
}

// hostFile maps a path inside the container to the repository file a bind
// mount puts there.
func (s composeService) hostFile(inContainer string) (string, bool) {
	for _, m := range s.mounts() {
		if m.source == "" {
			continue
		}
		if inContainer == m.target {
			return m.source, true
		}
		if rest, ok := strings.CutPrefix(inContainer, m.target+"/"); ok {
			return path.Join(m.source, rest), true
		}
	}
	return "", false
}

// flagValue returns the value of --name=value in the service's command.
func (s composeService) flagValue(name string) string {
	for _, a := range s.Command {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

type publishedPort struct{ hostIP, hostPort, containerPort string }

var interpolation = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?:(:?[-?])([^}]*))?\}`)

// interpolate resolves ${VAR:-default} to its default and ${VAR:?message}
// to a stand-in, as compose does with none of the variables set.
func interpolate(s string) string {
	return interpolation.ReplaceAllStringFunc(s, func(m string) string {
		g := interpolation.FindStringSubmatch(m)
		switch strings.TrimPrefix(g[2], ":") {
		case "-":
			return g[3]
		case "?":
			return "set-by-the-operator"
		}
		return ""
	})
}

func (s composeService) published(t *testing.T) []publishedPort {
	t.Helper()
	var out []publishedPort
	for _, p := range s.Ports {
		parts := strings.Split(interpolate(p), ":")
		require.Len(t, parts, 3, "port %q must name the host address, host port and container port", p)
		out = append(out, publishedPort{parts[0], parts[1], parts[2]})
	}
	return out
}

func (s composeService) containerPorts(t *testing.T) []string {
	var out []string
	for _, p := range s.published(t) {
		out = append(out, p.containerPort)
	}
	return out
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	decodeYAML(t, "docker-compose.yml", &c)
	return c
}

// portOf returns the port of a host:port address.
func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, addr)
	return port
}

// loadDlqConfig loads a configuration file the way `dlq serve --config`
// does, with env as the environment.
func loadDlqConfig(t *testing.T, file string, env map[string]string) config.Config {
	t.Helper()
	c, err := config.Load(config.Flags{ConfigFile: file}, func(k string) string { return env[k] })
	require.NoError(t, err, "%s is not a valid dlq configuration", file)
	return c
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range c.Services {
			if !yield(n) {
				return
			}
		}
	})
	require.Equal(t, []string{"alertmanager", "dlq", "grafana", "postgres", "prometheus", "rabbitmq"}, names)

	for name, s := range c.Services {
		// `docker compose up` (and `make services`) start the core alone.
		if slices.Contains([]string{"prometheus", "alertmanager", "grafana"}, name) {
			require.Equal(t, []string{"observability"}, s.Profiles, name)
		} else {
			require.Empty(t, s.Profiles, name)
		}
		for _, m := range s.mounts() {
			if m.volume != "" {
				require.Contains(t, c.Volumes, m.volume, "%s mounts the undeclared volume %s", name, m.volume)
				continue
			}
			_, err := os.Stat(repoPath(m.source))
			require.NoError(t, err, "%s mounts %s, which does not exist", name, m.source)
		}
		for _, p := range s.published(t) {
			require.Equal(t, "127.0.0.1", p.hostIP, "%s publishes port %s beyond loopback by default", name, p.containerPort)
		}
	}

	// dlq reads the mounted deploy/dlq.yaml, and listens where it is published.
	dlq := c.Services["dlq"]
	require.Len(t, dlq.Command, 3)
	require.Equal(t, []string{"serve", "--config"}, dlq.Command[:2])
	file, ok := dlq.hostFile(dlq.Command[2])
	require.True(t, ok, "dlq's --config %s is not mounted", dlq.Command[2])
	require.Equal(t, "deploy/dlq.yaml", file)
	env := map[string]string{}
	for k, v := range dlq.Environment {
		env[k] = interpolate(v)
	}
	cfg := loadDlqConfig(t, repoPath(file), env)
	ports := dlq.published(t)
	require.Len(t, ports, 1)
	require.Equal(t, portOf(t, cfg.HTTPAddr), ports[0].containerPort, "dlq listens on another port than compose publishes")
	require.Equal(t, portOf(t, config.HTTPAddrDefault), ports[0].hostPort, "the API is not where the CLI looks by default")
	require.Contains(t, dlq.Environment, "DLQ_ADMIN_TOKEN")

	// Prometheus and Alertmanager read their mounted configuration.
	for svc, want := range map[string]string{
		"prometheus":   "deploy/prometheus/prometheus.yml",
		"alertmanager": "deploy/alertmanager/alertmanager.yml",
	} {
		s := c.Services[svc]
		file, ok := s.hostFile(s.flagValue("config.file"))
		require.True(t, ok, "%s's --config.file is not mounted", svc)
		require.Equal(t, want, file)
	}
	g := c.Services["grafana"]
	file, ok = g.hostFile("/etc/grafana/provisioning/datasources")
	require.True(t, ok, "grafana's provisioning is not mounted")
	require.Equal(t, "deploy/grafana/provisioning/datasources", file)
}

// ---------------------------------------------------------------------------
// Prometheus and Alertmanager

type prometheusConfig struct {
	RuleFiles []string `yaml:"rule_files"`
	Alerting  struct {
		Alertmanagers []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"alertmanagers"`
	} `yaml:"alerting"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		HonorLabels   bool   `yaml:"honor_labels"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// requireComposeTarget checks that host:port names a compose service that
// publishes that container port.
func requireComposeTarget(t *testing.T, c composeFile, target, what string) {
	t.Helper()
	host, port, err := net.SplitHostPort(target)
	require.NoError(t, err, what)
	s, ok := c.Services[host]
	require.True(t, ok, "%s points at %s, which is no compose service", what, target)
	require.Contains(t, s.containerPorts(t), port, "%s points at port %s, which %s does not listen on", what, port, host)
}

func TestPrometheusConfig(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	var pc prometheusConfig
	decodeYAML(t, "deploy/prometheus/prometheus.yml", &pc)
	require.Equal(t, []string{"alerts.yml"}, pc.RuleFiles)

	require.Len(t, pc.Alerting.Alertmanagers, 1)
	for _, sc := range pc.Alerting.Alertmanagers[0].StaticConfigs {
		for _, target := range sc.Targets {
			requireComposeTarget(t, c, target, "prometheus.yml's alertmanager")
		}
	}

	var cfg config.Config
	for _, j := range pc.ScrapeConfigs {
		if j.JobName != "dlq" {
			continue
		}
		cfg = loadDlqConfig(t, repoPath("deploy/dlq.yaml"), nil)
		require.Equal(t, "/metrics", j.MetricsPath)
		// dlq_job_runs_total{job} and its siblings: without honor_labels
		// their job label becomes exported_job and the rules grouping by
		// job see only "dlq".
		require.True(t, j.HonorLabels, "the dlq scrape job needs honor_labels: true")
		require.Len(t, j.StaticConfigs, 1)
		require.Equal(t, []string{"dlq:" + portOf(t, cfg.HTTPAddr)}, j.StaticConfigs[0].Targets)
		requireComposeTarget(t, c, j.StaticConfigs[0].Targets[0], "the dlq scrape job")
	}
	require.NotEmpty(t, cfg.HTTPAddr, "prometheus.yml has no scrape job dlq")
}

type alertmanagerRoute struct {
	Receiver string              `yaml:"receiver"`
	Routes   []alertmanagerRoute `yaml:"routes"`
}

func TestAlertmanagerConfig(t *testing.T) {
	t.Parallel()
	var am struct {
		Route        alertmanagerRoute `yaml:"route"`
		InhibitRules []struct {
			SourceMatchers []string `yaml:"source_matchers"`
			TargetMatchers []string `yaml:"target_matchers"`
		} `yaml:"inhibit_rules"`
		Receivers []struct {
			Name string `yaml:"name"`
		} `yaml:"receivers"`
	}
	decodeYAML(t, "deploy/alertmanager/alertmanager.yml", &am)
	receivers := map[string]bool{}
	for _, r := range am.Receivers {
		receivers[r.Name] = true
	}
	var walk func(r alertmanagerRoute)
	walk = func(r alertmanagerRoute) {
		require.True(t, r.Receiver == "" || receivers[r.Receiver], "route to the undefined receiver %q", r.Receiver)
		for _, sub := range r.Routes {
			walk(sub)
		}
	}
	require.NotEmpty(t, am.Route.Receiver)
	walk(am.Route)

	// Inhibitions name alerts that exist: a Prometheus rule or one of
	// dlq's default rules.
	names := map[string]bool{}
	var rf ruleFile
	decodeYAML(t, "deploy/prometheus/alerts.yml", &rf)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			names[r.Alert] = true
		}
	}
	for _, r := range alerts.DefaultRules() {
		names[r.Name] = true
	}
	alertname := regexp.MustCompile(`^alertname="([^"]+)"$`)
	for _, ir := range am.InhibitRules {
		for _, m := range append(slices.Clone(ir.SourceMatchers), ir.TargetMatchers...) {
			if g := alertname.FindStringSubmatch(m); g != nil {
				require.True(t, names[g[1]], "an inhibit rule names the alert %s, which no rule raises", g[1])
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Grafana

func TestGrafanaProvisioning(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	g := c.Services["grafana"]

	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, Type, UID, URL string
			IsDefault            bool `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	decodeYAML(t, "deploy/grafana/provisioning/datasources/dlq.yml", &ds)
	require.Equal(t, 1, ds.APIVersion)
	var defaults []string
	for _, d := range ds.Datasources {
		u, err := url.Parse(d.URL)
		require.NoError(t, err)
		requireComposeTarget(t, c, u.Host, "data source "+d.Name)
		if d.IsDefault {
			defaults = append(defaults, d.Type)
		}
	}
	// The dashboard's data source variable takes the default one.
	require.Equal(t, []string{"prometheus"}, defaults)

	var dp struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	decodeYAML(t, "deploy/grafana/provisioning/dashboards/dlq.yml", &dp)
	require.Len(t, dp.Providers, 1)
	require.Equal(t, "file", dp.Providers[0].Type)
	home := g.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	require.Equal(t, dp.Providers[0].Options.Path, path.Dir(home))
	file, ok := g.hostFile(home)
	require.True(t, ok, "grafana's dashboard %s is not mounted", home)
	require.Equal(t, "deploy/grafana/dlq.json", file)
	file, ok = g.hostFile("/etc/grafana/provisioning/dashboards/dlq.yml")
	require.True(t, ok)
	require.Equal(t, "deploy/grafana/provisioning/dashboards/dlq.yml", file)

	var dash struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name, Type string
				Query      any
			}
		}
		Panels []struct {
			Title      string
			Datasource *struct{ Type, UID string }
			Targets    []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(readRepoFile(t, "deploy/grafana/dlq.json"), &dash))
	require.NotEmpty(t, dash.UID)
	var dsVar string
	for _, v := range dash.Templating.List {
		if v.Type == "datasource" {
			require.Equal(t, "prometheus", v.Query)
			dsVar = "${" + v.Name + "}"
		}
	}
	require.NotEmpty(t, dsVar, "the dashboard has no data source variable")
	defined := metricsInCode(t)
	for _, p := range dash.Panels {
		if p.Datasource != nil {
			require.Equal(t, dsVar, p.Datasource.UID, "panel %q picks its data source itself", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range queriedMetric.FindAllString(tg.Expr, -1) {
				require.True(t, isDefinedMetric(defined, m), "panel %q queries %s, which dlq does not define", p.Title, m)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Metric names

var (
	definedMetric = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(dlq_[a-z0-9_]+)"`)
	queriedMetric = regexp.MustCompile(`\bdlq_[a-z0-9_]+\b`)
)

// metricsInCode collects the metric names dlq's non-test sources define
// (the Name of a collector's options, or prometheus.NewDesc).
func metricsInCode(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "tmp" || d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range definedMetric.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, names["dlq_up"] && names["dlq_dead_messages"], "the scan for metric names found too little: %v", names)
	return names
}

// isDefinedMetric accepts the series a histogram adds to its name.
func isDefinedMetric(defined map[string]bool, name string) bool {
	if defined[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && defined[base] {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// promtool and amtool

func TestRuleCheckers(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, dir string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = repoPath(dir)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
	}
	t.Run("promtool", func(t *testing.T) {
		t.Parallel()
		if _, err := exec.LookPath("promtool"); err != nil {
			t.Skip("promtool not installed (scripts/services.sh installs it as root): the rules are checked by the parsers above only")
		}
		run(t, "deploy/prometheus", "promtool", "check", "config", "prometheus.yml")
		run(t, "deploy/prometheus", "promtool", "check", "rules", "alerts.yml")
		run(t, "deploy/prometheus", "promtool", "test", "rules", "alerts_test.yml")
	})
	t.Run("amtool", func(t *testing.T) {
		t.Parallel()
		if _, err := exec.LookPath("amtool"); err != nil {
			t.Skip("amtool not installed (scripts/services.sh installs it as root): the Alertmanager configuration is checked by the parser above only")
		}
		run(t, "deploy/alertmanager", "amtool", "check-config", "alertmanager.yml")
	})
}
