package deploy

import (
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/config"
)

// deploy/kubernetes: the objects are there, select each other's pods and
// ports, and carry a configuration dlq accepts.

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
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sContainer struct {
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

func TestKubernetesObjects(t *testing.T) {
	t.Parallel()
	objs := k8sObjects(t)
	require.ElementsMatch(t, []string{"ConfigMap", "Secret", "Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor"},
		slices.Collect(maps.Keys(objs)))
}

// dlqPod decodes the Deployment and returns it with its one container.
func dlqPod(t *testing.T, objs map[string]*yaml.Node) (k8sDeployment, k8sContainer) {
	t.Helper()
	var dep k8sDeployment
	decodeK8s(t, objs, "Deployment", &dep)
	require.Equal(t, 2, dep.Spec.Replicas)
	requireSelects(t, dep.Spec.Selector.MatchLabels, dep.Spec.Template.Metadata.Labels, "the Deployment's selector")
	require.Len(t, dep.Spec.Template.Spec.Containers, 1)
	return dep, dep.Spec.Template.Spec.Containers[0]
}

// TestKubernetesDeployment: dlq reads the ConfigMap, which says what
// deploy/dlq.yaml says, with the Secret as its environment; it listens on
// the port it declares, and is probed on its health routes.
func TestKubernetesDeployment(t *testing.T) {
	t.Parallel()
	objs := k8sObjects(t)
	dep, ctr := dlqPod(t, objs)

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

	// dlq listens on the port the container declares (and the CLI's
	// default); the probes ask public routes on it.
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
}

// TestKubernetesServing: the Service, the PodDisruptionBudget and the
// ServiceMonitor reach the pods and the port the Deployment declares.
func TestKubernetesServing(t *testing.T) {
	t.Parallel()
	objs := k8sObjects(t)
	dep, ctr := dlqPod(t, objs)
	pod := dep.Spec.Template.Metadata.Labels
	require.Len(t, ctr.Ports, 1)
	portName := ctr.Ports[0].Name
	public := publicRoutes()

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
