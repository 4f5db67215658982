//go:build cluster

package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// rabbitCluster is RabbitMQ nodes of one cluster on this machine, each
// with its own node name, ports and data directory under dir, and an
// Erlang cookie of their own: the machine's default node is neither used
// nor touched.
type rabbitCluster struct {
	dir   string
	bin   string
	env   []string
	nodes []*rabbitNode
	logf  func(string, ...any)
}

// rabbitNode is one node: its beam process is the child the cluster
// started (rabbitmq-server execs the Erlang VM when it may read its
// input, which -noinput then ignores), killed with the test process if
// that dies first.
type rabbitNode struct {
	name string
	port int
	env  []string
	log  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
}

// startRabbitCluster starts n nodes and joins them into one cluster. On
// error it stops what it started.
func startRabbitCluster(n int, logf func(string, ...any)) (_ *rabbitCluster, err error) {
	bin := cmp.Or(os.Getenv("DLQ_TEST_RABBITMQ_BIN"), "/usr/lib/rabbitmq/bin")
	if _, err := os.Stat(filepath.Join(bin, "rabbitmq-server")); err != nil {
		return nil, fmt.Errorf("no rabbitmq-server in %s (set DLQ_TEST_RABBITMQ_BIN): %w", bin, err)
	}
	dir, err := os.MkdirTemp("", "dlq-cluster-rabbit-")
	if err != nil {
		return nil, err
	}
	c := &rabbitCluster{dir: dir, bin: bin, logf: logf}
	defer func() {
		if err != nil {
			for _, n := range c.nodes {
				err = fmt.Errorf("%w\n%s output (last lines):\n%s", err, n.name, tail(n.log, 20))
			}
			err = errors.Join(err, c.stop())
		}
	}()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return nil, err
	}
	cookie := make([]byte, 32)
	for i := range cookie {
		cookie[i] = byte('A' + rand.IntN(26))
	}
	files := map[string]string{
		filepath.Join(home, ".erlang.cookie"):   string(cookie),
		filepath.Join(dir, "rabbitmq-env.conf"): "",
		filepath.Join(dir, "enabled_plugins"):   "[].\n",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o400); err != nil {
			return nil, err
		}
	}
	// The shared environment of servers and rabbitmqctl: our cookie, and
	// nothing from /etc/rabbitmq (the default node's name, its plugins).
	c.env = append(os.Environ(), "HOME="+home, "RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"))
	prefix := fmt.Sprintf("dlqc%04x", rand.IntN(1<<16))
	for i := range n {
		node, err := c.newNode(fmt.Sprintf("%s%d@localhost", prefix, i+1), filepath.Join(dir, fmt.Sprint(i+1)))
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, node)
	}
	start := time.Now()
	for i := range c.nodes {
		if err := c.startNode(i); err != nil {
			return nil, err
		}
	}
	for i := range c.nodes {
		if err := c.awaitStartup(i); err != nil {
			return nil, err
		}
	}
	for i := 1; i < n; i++ {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", c.nodes[0].name}, {"start_app"}} {
			if _, err := c.ctl(i, 3*time.Minute, args...); err != nil {
				return nil, err
			}
		}
	}
	out, err := c.ctl(0, time.Minute, "cluster_status", "--formatter", "json")
	if err != nil {
		return nil, err
	}
	var status struct {
		Running []string `json:"running_nodes"`
	}
	if err := json.Unmarshal(out, &status); err != nil || len(status.Running) != n {
		return nil, fmt.Errorf("cluster_status: want %d running nodes: %s (%v)", n, out, err)
	}
	logf("RabbitMQ cluster of %v up in %s", status.Running, time.Since(start).Round(time.Second))
	return c, nil
}

func (c *rabbitCluster) newNode(name, dir string) (*rabbitNode, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	ports := make([]int, 2)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
	}
	conf := filepath.Join(dir, "rabbitmq.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", ports[0])), 0o644); err != nil {
		return nil, err
	}
	// A copy: appending to c.env itself would let the nodes share one
	// backing array, and the last node's settings.
	return &rabbitNode{name: name, port: ports[0], log: filepath.Join(dir, "server.log"), env: append(slices.Clip(c.env),
		"RABBITMQ_NODENAME="+name,
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", ports[1]),
		"RABBITMQ_CONFIG_FILE="+conf,
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(c.dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_ALLOW_INPUT=1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-noinput -kernel inet_dist_use_interface {127,0,0,1}",
	)}, nil
}

// startNode starts node i's server process (again, after kill).
func (c *rabbitCluster) startNode(i int) error {
	n := c.nodes[i]
	out, err := os.OpenFile(n.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(filepath.Join(c.bin, "rabbitmq-server"))
	cmd.Env, cmd.Dir = n.env, filepath.Dir(n.log)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start RabbitMQ node %s: %w", n.name, err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		n.exitErr = err
		n.mu.Unlock()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	return nil
}

// awaitStartup waits until node i runs RabbitMQ. rabbitmqctl's
// await_startup fails at once while the node's Erlang VM has not
// registered yet, so it is asked again until the node runs, exits, or
// four minutes pass.
func (c *rabbitCluster) awaitStartup(i int) error {
	n := c.nodes[i]
	deadline := time.Now().Add(4 * time.Minute)
	for {
		_, err := c.ctl(i, time.Until(deadline)+time.Second, "await_startup", "--timeout", fmt.Sprint(int(time.Until(deadline).Seconds())))
		if err == nil {
			return nil
		}
		n.mu.Lock()
		exited, exitErr := n.exited, n.exitErr
		n.mu.Unlock()
		select {
		case <-exited:
			return fmt.Errorf("RabbitMQ node %s exited (%v): %w", n.name, exitErr, err)
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}

// restartNode starts node i's server again after kill and waits for it.
func (c *rabbitCluster) restartNode(i int) error {
	if err := c.startNode(i); err != nil {
		return err
	}
	return c.awaitStartup(i)
}

// kill kills node i's Erlang VM without warning: its connections drop,
// its queue replicas and leaders vanish at once.
func (c *rabbitCluster) kill(i int) {
	n := c.nodes[i]
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// ctl runs rabbitmqctl against node i.
func (c *rabbitCluster) ctl(i int, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "rabbitmqctl"), append([]string{"-n", c.nodes[i].name}, args...)...)
	cmd.Env = c.env
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return out, fmt.Errorf("rabbitmqctl -n %s %s: %w: %s%s", c.nodes[i].name, strings.Join(args, " "), err, out, stderr)
	}
	return out, nil
}

// url is the AMQP URL of node i.
func (c *rabbitCluster) url(i int) string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", c.nodes[i].port)
}

// urls are the nodes' URLs, starting with node first.
func (c *rabbitCluster) urls(first int) []string {
	var out []string
	for k := range c.nodes {
		out = append(out, c.url((first+k)%len(c.nodes)))
	}
	return out
}

// leader returns which node holds the leader of quorum queue name, asking
// node via.
func (c *rabbitCluster) leader(via int, name string) (int, error) {
	out, err := c.ctl(via, time.Minute, "list_queues", "-q", "--no-table-headers", "name", "leader", "members")
	if err != nil {
		return -1, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 2 || f[0] != name {
			continue
		}
		for i, n := range c.nodes {
			if strings.TrimSpace(f[1]) == n.name {
				return i, nil
			}
		}
		return -1, fmt.Errorf("queue %s: leader %q is none of the cluster's nodes (%s)", name, f[1], line)
	}
	return -1, fmt.Errorf("queue %s not listed by node %s: %s", name, c.nodes[via].name, out)
}

// stop stops every node (rabbitmqctl stop, then SIGKILL for one that does
// not) and removes the cluster's directory.
func (c *rabbitCluster) stop() error {
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, n := range c.nodes {
		n.mu.Lock()
		cmd, exited := n.cmd, n.exited
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-exited:
				return
			default:
			}
			if _, err := c.ctl(i, time.Minute, "stop"); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-exited
			}
		}()
	}
	wg.Wait()
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ensureUp brings node i back whatever a test did to it: its process
// started again if it was killed, its application if it was stopped.
func (c *rabbitCluster) ensureUp(i int) error {
	n := c.nodes[i]
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	select {
	case <-exited:
		return c.restartNode(i)
	default:
	}
	if _, err := c.ctl(i, 3*time.Minute, "start_app"); err != nil {
		return err
	}
	return c.awaitStartup(i)
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
