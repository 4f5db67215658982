package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
)

func TestUnsafeSettings(t *testing.T) {
	t.Parallel()
	keys := func(fs []broker.PolicyFinding) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.Key)
		}
		return out
	}
	require.Empty(t, broker.UnsafeSettings(map[string]any{"x-queue-type": "quorum"}, "x-"))
	require.Empty(t, broker.UnsafeSettings(map[string]any{"x-delivery-limit": float64(-1)}, "x-"), "-1 is unlimited")
	require.Empty(t, broker.UnsafeSettings(map[string]any{"ha-mode": "all", "overflow": "drop-head"}, ""), "overflow alone drops nothing")
	require.Equal(t, []string{"delivery-limit", "max-length", "max-length-bytes", "message-ttl", "expires"},
		keys(broker.UnsafeSettings(map[string]any{
			"delivery-limit": float64(0), "max-length": float64(10), "max-length-bytes": float64(1 << 20),
			"message-ttl": float64(1000), "expires": float64(60000), "overflow": "drop-head",
		}, "")))
	require.Equal(t, []string{"max-length"}, keys(broker.UnsafeSettings(map[string]any{"x-max-length": int64(5)}, "x-")))
}

// managementURL returns the management API of the test broker, enabling
// the plugin if it is off (idempotent; the node keeps running), or skips.
func managementURL(t *testing.T) *url.URL {
	t.Helper()
	raw := os.Getenv("DLQ_TEST_MANAGEMENT_URL")
	if raw == "" {
		raw = "http://guest:guest@127.0.0.1:15672/"
	}
	u, err := url.Parse(raw)
	require.NoError(t, err, "DLQ_TEST_MANAGEMENT_URL")
	reachable := func() error {
		resp, err := mgmt(u, http.MethodGet, "/api/overview", "")
		if err != nil {
			return err
		}
		if resp != http.StatusOK {
			return fmt.Errorf("GET /api/overview answered %d", resp)
		}
		return nil
	}
	err = reachable()
	if err == nil {
		return u
	}
	if os.Getenv("DLQ_TEST_MANAGEMENT_URL") == "" {
		out, cerr := exec.Command("rabbitmq-plugins", "enable", "rabbitmq_management").CombinedOutput()
		if cerr == nil {
			deadline := time.Now().Add(20 * time.Second)
			for err = reachable(); err != nil && time.Now().Before(deadline); err = reachable() {
				time.Sleep(200 * time.Millisecond)
			}
			if err == nil {
				return u
			}
		} else {
			err = fmt.Errorf("%w; rabbitmq-plugins enable rabbitmq_management: %v: %s", err, cerr, bytes.TrimSpace(out))
		}
	}
	t.Skipf("RabbitMQ's management API is not reachable at %s (%v): enable it with `rabbitmq-plugins enable rabbitmq_management`, or point DLQ_TEST_MANAGEMENT_URL at it", u.Redacted(), err)
	return nil
}

// mgmt sends one request to the management API and returns its status.
func mgmt(u *url.URL, method, path, body string) (int, error) {
	base := *u
	base.User = nil
	req, err := http.NewRequest(method, strings.TrimSuffix(base.String(), "/")+path, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	pw, _ := u.User.Password()
	req.SetBasicAuth(u.User.Username(), pw)
	req.Header.Set("Content-Type", "application/json")
	// A transport of its own, closed after the call: no idle connection
	// outlives the test (goleak).
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: tr}).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// setPolicy puts a policy (kind "policies") or operator policy (kind
// "operator-policies") that matches only queue. It is removed by the
// returned function, or when the test ends.
func setPolicy(t *testing.T, u *url.URL, kind, name, queue, definition string) (remove func()) {
	t.Helper()
	path := "/api/" + kind + "/%2F/" + url.PathEscape(name)
	body := fmt.Sprintf(`{"pattern":"^%s$","definition":%s,"apply-to":"queues","priority":100}`, regexp.QuoteMeta(queue), definition)
	code, err := mgmt(u, http.MethodPut, path, body)
	require.NoError(t, err)
	require.Contains(t, []int{http.StatusCreated, http.StatusNoContent}, code, "PUT %s", path)
	remove = func() {
		code, err := mgmt(u, http.MethodDelete, path, "")
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusNoContent, http.StatusNotFound}, code, "DELETE %s", path)
	}
	t.Cleanup(func() { _, _ = mgmt(u, http.MethodDelete, path, "") })
	return remove
}

// unsafeGauge reads dlq_queue_policy_unsafe{queue} from reg; -1 when the
// series is missing.
func unsafeGauge(t *testing.T, reg *prometheus.Registry, queue string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "dlq_queue_policy_unsafe" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == queue {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// syncBuffer is a log destination safe for the checker's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substrs ...string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range strings.Split(s.b.String(), "\n") {
		all := true
		for _, sub := range substrs {
			all = all && strings.Contains(l, sub)
		}
		if all {
			n++
		}
	}
	return n
}

// TestPolicyCheck: a policy, an operator policy or a queue argument that
// can drop messages from one of dlq's queues turns
// dlq_queue_policy_unsafe{queue} to 1 and is logged with the queue and the
// key; once removed, the gauge falls back to 0.
func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	u := managementURL(t)
	app := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, app)
	safe, policed, limited := dlqtest.Name(t, "dlq_safe"), dlqtest.Name(t, "dlq_policed"), dlqtest.Name(t, "dlq_limited")
	for _, q := range []string{safe, policed} {
		_, err := ch.QueueDeclare(q, true, false, false, false, broker.OwnQueueArgs(app.Properties["version"].(string)))
		require.NoError(t, err)
	}
	_, err := ch.QueueDeclare(limited, true, false, false, false, amqp.Table{"x-queue-type": "classic", "x-max-length": int32(100)})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, app, safe, policed, limited)

	var logs syncBuffer
	reg := prometheus.NewRegistry()
	base := *u
	base.User = nil
	pw, _ := u.User.Password()
	pc, err := broker.NewPolicyCheck(broker.PolicyCheckConfig{
		URL: base.String(), User: u.User.Username(), Password: pw,
		Queues:     []string{safe, policed, limited},
		Interval:   100 * time.Millisecond,
		Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
		Registerer: reg,
	})
	require.NoError(t, err)
	gauge := func(q string) float64 { return unsafeGauge(t, reg, q) }
	for _, q := range []string{safe, policed, limited} {
		require.Zero(t, gauge(q), "every queue has a zero series before the first check")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = pc.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	dlqtest.Eventually(t, 20*time.Second, func() bool { return gauge(limited) == 1 },
		"a queue declared with x-max-length is not reported: %v", gauge(limited))
	require.Positive(t, logs.lines("UNSAFE", limited, "key=max-length", "queue argument x-max-length"))
	require.Zero(t, gauge(safe))
	require.Zero(t, gauge(policed), "no policy yet")

	removePolicy := setPolicy(t, u, "policies", dlqtest.Name(t, "pol"), policed, `{"delivery-limit": 5}`)
	removeOperator := setPolicy(t, u, "operator-policies", dlqtest.Name(t, "oppol"), policed, `{"message-ttl": 60000}`)
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		return gauge(policed) == 1 && logs.lines("UNSAFE", policed, "key=delivery-limit") > 0 &&
			logs.lines("UNSAFE", policed, "key=message-ttl", "operator policy") > 0
	}, "policies on %s not reported; gauge %v", policed, gauge(policed))
	require.Zero(t, gauge(safe), "a queue without policies stays safe")
	require.Zero(t, logs.lines("UNSAFE", safe))

	removePolicy()
	removeOperator()
	dlqtest.Eventually(t, 20*time.Second, func() bool { return gauge(policed) == 0 },
		"gauge of %s did not fall back to 0 after the policies were removed", policed)
	require.Equal(t, float64(1), gauge(limited), "the argument is still there")
}
