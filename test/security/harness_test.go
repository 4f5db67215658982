package security

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/internal/proctest"
)

// dlqBin is the dlq binary under test, built once for the package.
var dlqBin string

func TestMain(m *testing.M) {
	// DLQ_TEST_DLQ_BIN runs the tests against a binary built elsewhere
	// (make test's), as test/ingest does.
	os.Exit(proctest.RunWithDLQ(m, &dlqBin))
}

// Tokens of every deployment (api.tokens in its YAML file).
const (
	tokAdmin    = "admin-tok-5f1c2a"
	tokOperator = "operator-tok-9d3e7b"
	tokViewer   = "viewer-tok-2b8a4c"
)

// deployment is one isolated dlq: its own schema, exchange, queues, HTTP
// port, keys and log, and the processes run on them.
type deployment struct {
	t        *testing.T
	dsn      string
	schema   string
	exchange string
	queue    string
	control  string
	// source is a classic queue whose messages expire at once into the
	// exchange: publishing to it makes a dead letter.
	source string
	// sinkX and sink take what a replay sends (a replay's target).
	sinkX, sink string
	httpAddr    string
	dir         string
	logPath     string
	config      string
	env         map[string]string

	mu   sync.Mutex
	proc *proc
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	_, dsn := dlqtest.Store(t)
	d := &deployment{
		t: t, dsn: dsn,
		exchange: dlqtest.Name(t, "dlx"), queue: dlqtest.Name(t, "dlq"), control: dlqtest.Name(t, "ctl"),
		source: dlqtest.Name(t, "src"), sinkX: dlqtest.Name(t, "sinkx"), sink: dlqtest.Name(t, "sink"),
		httpAddr: freeAddr(t), dir: t.TempDir(), env: map[string]string{},
	}
	d.schema = strings.Split(strings.Split(dsn, "search_path=")[1], "%2C")[0]
	d.logPath = filepath.Join(d.dir, "dlq.log")
	d.config = filepath.Join(d.dir, "dlq.yaml")
	require.NoError(t, os.WriteFile(d.config, []byte(`
api:
  tokens:
    - {name: ops, token: `+tokOperator+`, role: operator}
    - {name: view, token: `+tokViewer+`, role: viewer, bodies: true}
`), 0o600))
	conn := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, conn)
	version, _ := conn.Properties["version"].(string)
	require.NoError(t, ch.ExchangeDeclare(d.exchange, "topic", true, false, false, false, nil))
	_, err := ch.QueueDeclare(d.queue, true, false, false, false, broker.OwnQueueArgs(version))
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(d.queue, "#", d.exchange, false, nil))
	_, err = ch.QueueDeclare(d.source, true, false, false, false, amqp.Table{
		"x-queue-type": "classic", "x-message-ttl": int32(0), "x-dead-letter-exchange": d.exchange})
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDeclare(d.sinkX, "fanout", false, true, false, false, nil))
	_, err = ch.QueueDeclare(d.sink, false, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(d.sink, "#", d.sinkX, false, nil))
	t.Cleanup(func() {
		c, err := amqp.Dial(dlqtest.AMQPURL())
		if err != nil {
			return
		}
		defer c.Close()
		proctest.DeleteTopology(c, []string{d.queue, d.control, d.source, d.sink}, []string{d.exchange, d.sinkX})
	})
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(d.logPath); err == nil {
				lines := strings.Split(string(b), "\n")
				t.Logf("dlq output (last lines):\n%s", strings.Join(lines[max(0, len(lines)-80):], "\n"))
			}
		}
	})
	return d
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// newKey is one key list entry: id:base64 of 32 random bytes.
func newKey(t *testing.T, id string) string {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return id + ":" + base64.StdEncoding.EncodeToString(b)
}

// environ is a process's environment: ours without DLQ_* settings, then
// the deployment's, then extra.
func (d *deployment) environ(extra map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLQ_") {
			env = append(env, kv)
		}
	}
	vars := map[string]string{
		"DLQ_DATABASE_URL":  d.dsn,
		"DLQ_AMQP_URL":      dlqtest.AMQPURL(),
		"DLQ_EXCHANGE":      d.exchange,
		"DLQ_QUEUES":        d.queue,
		"DLQ_CONTROL_QUEUE": d.control,
		"DLQ_HTTP_ADDR":     d.httpAddr,
		"DLQ_ADMIN_TOKEN":   tokAdmin,
		"DLQ_CRON_DISABLED": "true",
		"DLQ_URL":           "http://" + d.httpAddr,
	}
	for k, v := range d.env {
		vars[k] = v
	}
	for k, v := range extra {
		vars[k] = v
	}
	for k, v := range vars {
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// proc is one dlq process whose output goes to the deployment's log.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	state  *os.ProcessState
	out    *syncWriter // its own output too, over a bytes.Buffer
}

func (p *proc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// start runs `dlq args...` in the background with the deployment's
// configuration file.
func (d *deployment) start(extra map[string]string, args ...string) *proc {
	d.t.Helper()
	f, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(d.t, err)
	fmt.Fprintf(f, "=== dlq %s at %s\n", strings.Join(args, " "), time.Now().Format(time.RFC3339Nano))
	out := &syncWriter{w: &bytes.Buffer{}}
	cmd := exec.Command(dlqBin, append(args, "--config", d.config)...)
	cmd.Env = d.environ(extra)
	w := io.MultiWriter(f, out)
	cmd.Stdout, cmd.Stderr = w, w
	require.NoError(d.t, cmd.Start())
	p := &proc{cmd: cmd, exited: make(chan struct{}), out: out}
	go func() {
		_ = cmd.Wait()
		_ = f.Close() // the output is copied until Wait returns
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	d.t.Cleanup(func() {
		if !p.done() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-p.exited
			}
		}
	})
	return p
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// output is what p wrote so far.
func (p *proc) output() string {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return p.out.w.(*bytes.Buffer).String()
}

// serve starts `dlq serve` and waits until it is ready.
func (d *deployment) serve(extra map[string]string) *proc {
	d.t.Helper()
	p := d.start(extra, "serve")
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if p.done() {
			d.t.Fatalf("dlq serve exited while starting (%s):\n%s", p.state, p.output())
		}
		if code, _ := d.get("", "/readyz"); code == http.StatusOK {
			d.mu.Lock()
			d.proc = p
			d.mu.Unlock()
			return p
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.t.Fatalf("dlq serve not ready:\n%s", p.output())
	return nil
}

// stop ends the running serve.
func (d *deployment) stop() {
	d.t.Helper()
	d.mu.Lock()
	p := d.proc
	d.proc = nil
	d.mu.Unlock()
	if p == nil {
		return
	}
	require.NoError(d.t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// run runs `dlq args...` to its end and returns its output and exit code.
func (d *deployment) run(extra map[string]string, args ...string) (string, int) {
	d.t.Helper()
	p := d.start(extra, args...)
	select {
	case <-p.exited:
	case <-time.After(3 * time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
		d.t.Fatalf("dlq %v did not end:\n%s", args, p.output())
	}
	return p.output(), p.state.ExitCode()
}

// runCLI runs an operator command (no --config: the CLI reads DLQ_URL and
// DLQ_TOKEN).
func (d *deployment) runCLI(token string, args ...string) (string, int) {
	d.t.Helper()
	cmd := exec.Command(dlqBin, args...)
	cmd.Env = d.environ(map[string]string{"DLQ_TOKEN": token})
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = cmd.ProcessState.ExitCode()
	}
	return string(out), code
}

func (d *deployment) request(token, method, path string, body any) (int, []byte) {
	d.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(d.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+d.httpAddr+path, rd)
	require.NoError(d.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(d.t, err)
	return resp.StatusCode, b
}

func (d *deployment) get(token, path string) (int, []byte) {
	d.t.Helper()
	return d.request(token, http.MethodGet, path, nil)
}

// message is what the tests read of the API's message JSON.
type message struct {
	ID         int64             `json:"id"`
	MessageID  *string           `json:"message_id"`
	Headers    map[string]any    `json:"headers"`
	Properties map[string]any    `json:"properties"`
	Failure    map[string]any    `json:"failure"`
	Body       []byte            `json:"body"`
	Status     string            `json:"status"`
	Encryption *json.RawMessage  `json:"encryption"`
	Extra      map[string]string `json:"-"`
}

func (d *deployment) messages(token, query string) []message {
	d.t.Helper()
	code, b := d.get(token, "/api/v1/messages?status=all&include_body=true&limit=1000"+query)
	require.Equal(d.t, http.StatusOK, code, string(b))
	var page struct {
		Messages []message `json:"messages"`
	}
	require.NoError(d.t, json.Unmarshal(b, &page))
	return page.Messages
}

// waitMessages waits until the API lists n messages.
func (d *deployment) waitMessages(n int) []message {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ms := d.messages(tokAdmin, "")
		if len(ms) >= n || time.Now().After(deadline) {
			require.Len(d.t, ms, n)
			return ms
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deadLetter publishes p to the source queue, where it expires at once
// into dlq's exchange.
func (d *deployment) deadLetter(p amqp.Publishing) {
	d.t.Helper()
	conn := dlqtest.Dial(d.t)
	ch := dlqtest.Channel(d.t, conn)
	require.NoError(d.t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", d.source, true, false, p)
	require.NoError(d.t, err)
	ok, err := dc.WaitContext(context.Background())
	require.NoError(d.t, err)
	require.True(d.t, ok)
}

// sinkMessages waits for n messages in the sink queue and returns them.
func (d *deployment) sinkMessages(n int) []amqp.Delivery {
	d.t.Helper()
	conn := dlqtest.Dial(d.t)
	ch := dlqtest.Channel(d.t, conn)
	var out []amqp.Delivery
	deadline := time.Now().Add(60 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		dl, ok, err := ch.Get(d.sink, true)
		require.NoError(d.t, err)
		if !ok {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		out = append(out, dl)
	}
	require.Len(d.t, out, n, "messages replayed to the sink")
	return out
}

// replayTo replays ids to the sink as token and waits for the task.
func (d *deployment) replayTo(token string, ids ...int64) map[string]any {
	d.t.Helper()
	code, b := d.request(token, http.MethodPost, "/api/v1/replays", map[string]any{
		"ids": ids, "target": map[string]string{"exchange": d.sinkX, "routing_key": "x"}})
	require.Equal(d.t, http.StatusAccepted, code, string(b))
	var task struct {
		ID int64 `json:"id"`
	}
	require.NoError(d.t, json.Unmarshal(b, &task))
	return d.waitTask(token, task.ID)
}

func (d *deployment) waitTask(token string, id int64) map[string]any {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, b := d.get(token, fmt.Sprintf("/api/v1/replays/%d", id))
		require.Equal(d.t, http.StatusOK, code, string(b))
		var t map[string]any
		require.NoError(d.t, json.Unmarshal(b, &t))
		switch t["status"] {
		case "completed", "failed", "cancelled", "canary_failed":
			return t
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("replay task %d not done: %s", id, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// basePool connects to the test database (every test's schema in it).
func basePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), dlqtest.DatabaseURLBase())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// logText is everything the deployment's processes wrote.
func (d *deployment) logText() string {
	b, err := os.ReadFile(d.logPath)
	require.NoError(d.t, err)
	return string(b)
}
