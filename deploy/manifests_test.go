package deploy

import (
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/config"
)

// The deploy files are held to each other and to the code: each parses, the
// files the compose file mounts exist, the ports agree (compose, Kubernetes,
// Prometheus, Grafana and dlq's defaults), the metrics the rules and the
// dashboard query are ones dlq defines, and every runbook_url lands on a
// section of docs/RUNBOOK.md. promtool and amtool check what they know,
// where installed (scripts/services.sh installs them).

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
	require.GreaterOrEqual(t, n, 13)
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
// Kubernetes

type k8sMeta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

type k8sDeployment struct {
	Spec struct {
		Replicas int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata k8sMeta `yaml:"metadata"`
			Spec     struct {
				Containers []struct {
					Args    []string `yaml:"args"`
					EnvFrom []struct {
						SecretRef *struct {
							Name string `yaml:"name"`
						} `yaml:"secretRef"`
					} `yaml:"envFrom"`
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					StartupProbe   *k8sProbe `yaml:"startupProbe"`
					ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
					LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
					VolumeMounts   []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sService struct {
	Spec struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sPDB struct {
	Spec struct {
		MinAvailable int `yaml:"minAvailable"`
		Selector     struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	} `yaml:"spec"`
}

type k8sServiceMonitor struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Endpoints []struct {
			Port        string `yaml:"port"`
			Path        string `yaml:"path"`
			HonorLabels bool   `yaml:"honorLabels"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
}

// k8sObjects reads every document of deploy/kubernetes, by kind.
func k8sObjects(t *testing.T) map[string]*yaml.Node {
	t.Helper()
	files, err := filepath.Glob(repoPath("deploy/kubernetes/*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string]*yaml.Node{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		for {
			var doc yaml.Node
			if err := dec.Decode(&doc); err != nil {
				require.ErrorIs(t, err, io.EOF, "%s does not parse", f)
				break
			}
			var head struct {
				APIVersion string  `yaml:"apiVersion"`
				Kind       string  `yaml:"kind"`
				Metadata   k8sMeta `yaml:"metadata"`
			}
			require.NoError(t, doc.Decode(&head), f)
			require.NotEmpty(t, head.APIVersion, f)
			require.NotEmpty(t, head.Metadata.Name, f)
			require.NotContains(t, out, head.Kind, "two objects of kind %s", head.Kind)
			out[head.Kind] = &doc
		}
	}
	return out
}

func decodeK8s(t *testing.T, objs map[string]*yaml.Node, kind string, v any) k8sMeta {
	t.Helper()
	n, ok := objs[kind]
	require.True(t, ok, "deploy/kubernetes has no %s", kind)
	require.NoError(t, n.Decode(v), kind)
	var m struct {
		Metadata k8sMeta `yaml:"metadata"`
	}
	require.NoError(t, n.Decode(&m))
	return m.Metadata
}

func requireSelects(t *testing.T, selector, labels map[string]string, what string) {
	t.Helper()
	require.NotEmpty(t, selector, what)
	for k, v := range selector {
		require.Equal(t, v, labels[k], "%s does not select the pods (label %s)", what, k)
	}
}

func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	objs := k8sObjects(t)
	require.ElementsMatch(t, []string{"ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor"},
		slices.Collect(func(yield func(string) bool) {
			for k := range objs {
				if !yield(k) {
					return
				}
			}
		}))

	var dep k8sDeployment
	decodeK8s(t, objs, "Deployment", &dep)
	require.Equal(t, 2, dep.Spec.Replicas)
	pod := dep.Spec.Template.Metadata.Labels
	requireSelects(t, dep.Spec.Selector.MatchLabels, pod, "the Deployment's selector")
	require.Len(t, dep.Spec.Template.Spec.Containers, 1)
	ctr := dep.Spec.Template.Spec.Containers[0]

	// The ConfigMap is mounted where --config reads it, and holds the same
	// settings as deploy/dlq.yaml.
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	cmMeta := decodeK8s(t, objs, "ConfigMap", &cm)
	require.Len(t, ctr.Args, 3)
	require.Equal(t, []string{"serve", "--config"}, ctr.Args[:2])
	require.Len(t, ctr.VolumeMounts, 1)
	require.Equal(t, ctr.VolumeMounts[0].MountPath+"/dlq.yaml", ctr.Args[2])
	vols := dep.Spec.Template.Spec.Volumes
	require.Len(t, vols, 1)
	require.Equal(t, ctr.VolumeMounts[0].Name, vols[0].Name)
	require.NotNil(t, vols[0].ConfigMap)
	require.Equal(t, cmMeta.Name, vols[0].ConfigMap.Name)
	require.Contains(t, cm.Data, "dlq.yaml")
	inCluster := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(inCluster, []byte(cm.Data["dlq.yaml"]), 0o600))
	require.Equal(t, loadDlqConfig(t, repoPath("deploy/dlq.yaml"), nil), loadDlqConfig(t, inCluster, nil),
		"the ConfigMap and deploy/dlq.yaml say different things")

	// The Secret gives the environment, and together they make a valid
	// configuration.
	var sec struct {
		StringData map[string]string `yaml:"stringData"`
	}
	secMeta := decodeK8s(t, objs, "Secret", &sec)
	require.Len(t, ctr.EnvFrom, 1)
	require.NotNil(t, ctr.EnvFrom[0].SecretRef)
	require.Equal(t, secMeta.Name, ctr.EnvFrom[0].SecretRef.Name)
	require.Contains(t, sec.StringData, "DLQ_ADMIN_TOKEN")
	for k, v := range sec.StringData {
		require.True(t, strings.HasPrefix(k, "DLQ_"), "Secret key %s is no dlq setting", k)
		require.Contains(t, v, "change-me", "Secret %s holds a real-looking value; placeholders only", k)
	}
	cfg := loadDlqConfig(t, inCluster, sec.StringData)

	// Ports: dlq's, the container's, the Service's and the scrape's agree.
	require.Len(t, ctr.Ports, 1)
	require.Equal(t, portOf(t, cfg.HTTPAddr), strconv.Itoa(ctr.Ports[0].ContainerPort))
	require.Equal(t, portOf(t, config.HTTPAddrDefault), strconv.Itoa(ctr.Ports[0].ContainerPort))
	portName := ctr.Ports[0].Name
	public := publicRoutes()
	for name, p := range map[string]*k8sProbe{"startup": ctr.StartupProbe, "readiness": ctr.ReadinessProbe, "liveness": ctr.LivenessProbe} {
		require.NotNil(t, p, "%s probe", name)
		require.NotNil(t, p.HTTPGet, "%s probe", name)
		require.Equal(t, portName, p.HTTPGet.Port, "%s probe", name)
		require.True(t, public[p.HTTPGet.Path], "%s probe on %s, which is no public route", name, p.HTTPGet.Path)
	}
	require.Equal(t, "/readyz", ctr.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", ctr.LivenessProbe.HTTPGet.Path)

	var svc k8sService
	svcMeta := decodeK8s(t, objs, "Service", &svc)
	requireSelects(t, svc.Spec.Selector, pod, "the Service")
	require.Len(t, svc.Spec.Ports, 1)
	require.Equal(t, portName, svc.Spec.Ports[0].TargetPort)
	require.Equal(t, ctr.Ports[0].ContainerPort, svc.Spec.Ports[0].Port)

	var pdb k8sPDB
	decodeK8s(t, objs, "PodDisruptionBudget", &pdb)
	requireSelects(t, pdb.Spec.Selector.MatchLabels, pod, "the PodDisruptionBudget")
	require.GreaterOrEqual(t, pdb.Spec.MinAvailable, 1)
	require.Less(t, pdb.Spec.MinAvailable, dep.Spec.Replicas, "a drain could never proceed")

	var sm k8sServiceMonitor
	decodeK8s(t, objs, "ServiceMonitor", &sm)
	requireSelects(t, sm.Spec.Selector.MatchLabels, svcMeta.Labels, "the ServiceMonitor")
	require.Len(t, sm.Spec.Endpoints, 1)
	require.Equal(t, svc.Spec.Ports[0].Name, sm.Spec.Endpoints[0].Port)
	require.True(t, public[sm.Spec.Endpoints[0].Path])
	require.Equal(t, "/metrics", sm.Spec.Endpoints[0].Path)
	require.True(t, sm.Spec.Endpoints[0].HonorLabels, "dlq's job label must survive the scrape, as in prometheus.yml")
}

func publicRoutes() map[string]bool {
	out := map[string]bool{}
	for _, r := range api.Routes() {
		if r.Role == "" && r.Method == "GET" {
			out[r.Path] = true
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// docs/RUNBOOK.md

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

func TestRunbook(t *testing.T) {
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

	// What it tells people to run matches the code: API routes, metrics
	// and configuration keys.
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

	// And the commands: each is one of dlq's, and each flag one it takes.
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
	cliCommandRe = regexp.MustCompile(`\{"([a-z]+)", "[^"]*", cmd[A-Za-z]+\}`)
	cliFlagRe    = regexp.MustCompile(`fs\.(?:[A-Za-z0-9]+Var|Func|String|Bool|Int|Duration)\(\s*(?:&[\w.]+,\s*)?"([a-z][a-z-]*)"`)
)

// cliNames returns dlq's subcommands (cmd/dlq/commands.go) and every flag
// name its commands register. jobs, alerts and audit are being added to the
// command line beside this runbook (issue 17); their views are in the API
// already.
func cliNames(t *testing.T) (cmds, flags map[string]bool) {
	t.Helper()
	cmds = map[string]bool{"help": true, "jobs": true, "alerts": true, "audit": true}
	for _, m := range cliCommandRe.FindAllStringSubmatch(string(readRepoFile(t, "cmd/dlq/commands.go")), -1) {
		cmds[m[1]] = true
	}
	require.True(t, cmds["serve"] && cmds["replay"] && cmds["ls"], "the scan for commands found too little: %v", cmds)
	flags = map[string]bool{"help": true}
	files, err := filepath.Glob(repoPath("cmd/dlq/*.go"))
	require.NoError(t, err)
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
