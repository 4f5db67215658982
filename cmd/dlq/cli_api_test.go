package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// cliServer runs the real API on a loopback port over a fresh schema with
// a few dead messages, and returns its URL and the stored ids.
func cliServer(t *testing.T) (string, *store.Store, []int64) {
	t.Helper()
	st, _ := dlqtest.Store(t)
	authn, err := auth.New(auth.Config{
		AdminToken: "cli-admin-token",
		Tokens:     []auth.Token{{Name: "viewer", Token: "cli-viewer-token", Role: auth.RoleViewer}},
	})
	require.NoError(t, err)
	operations, err := ops.New(ops.Config{Store: st, ConfirmAbove: 3})
	require.NoError(t, err)
	srv, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: operations, Auth: authn,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	var batch store.IngestBatch
	batch.ID, batch.Consumer = store.NewBatchID(), "test"
	for i := range 6 {
		queue := "orders"
		if i >= 4 {
			queue = "billing"
		}
		d := &amqp.Delivery{
			MessageId: fmt.Sprintf("m-%d", i), ContentType: "application/json", Body: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Headers: amqp.Table{
				"x-death":          []any{amqp.Table{"queue": queue, "reason": "rejected", "exchange": "app", "count": int64(1), "time": time.Now().UTC().Truncate(time.Second)}},
				"x-exception-type": "TimeoutError",
				"x-error-message":  fmt.Sprintf("upstream took %dms", 100*i),
			},
		}
		m := broker.Convert(d, "dlq", time.Now())
		m.Fingerprint = int64(i + 1)
		batch.Messages = append(batch.Messages, m)
	}
	_, err = st.IngestBatch(context.Background(), batch)
	require.NoError(t, err)
	var ids []int64
	rows, err := st.Pool().Query(context.Background(), `SELECT id FROM dead_messages ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	return "http://" + ln.Addr().String(), st, ids
}

// cli runs one operator command in-process.
func cli(t *testing.T, url, token string, run func([]string, cliEnv) int, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := cliEnv{
		getenv: func(k string) string {
			switch k {
			case "DLQ_URL":
				return url
			case "DLQ_TOKEN":
				return token
			}
			return ""
		},
		stdout: &out, stderr: &errOut,
	}
	code := run(args, env)
	return code, out.String(), errOut.String()
}

func TestCLIAgainstLiveServer(t *testing.T) {
	t.Parallel()
	url, st, ids := cliServer(t)
	const admin = "cli-admin-token"

	code, out, _ := cli(t, url, admin, runLs)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "ID")
	require.Contains(t, out, "TimeoutError: upstream took 500ms")
	require.Equal(t, 7, strings.Count(out, "\n"), "header + 6 messages")

	code, out, errOut := cli(t, url, admin, runLs, "--queue", "orders", "--limit", "2")
	require.Equal(t, exitOK, code)
	require.Equal(t, 3, strings.Count(out, "\n"))
	require.Contains(t, errOut, "--cursor")
	code, out, _ = cli(t, url, admin, runLs, "--queue", "orders", "--limit", "2", "--all")
	require.Equal(t, exitOK, code)
	require.Equal(t, 5, strings.Count(out, "\n"), "header + 4 orders")
	code, out, _ = cli(t, url, admin, runLs, "--q", "took 300ms", "--json", "--after", "1h")
	require.Equal(t, exitOK, code)
	var page struct{ Messages []store.Message }
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	require.Len(t, page.Messages, 1)
	require.Equal(t, ids[3], page.Messages[0].ID)

	code, out, _ = cli(t, url, admin, runShow, fmt.Sprint(ids[0]))
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "m-0")
	require.Contains(t, out, `{"n":0}`)
	require.Contains(t, out, "x-death")
	code, _, _ = cli(t, url, "cli-viewer-token", runShow, fmt.Sprint(ids[0]))
	require.Equal(t, exitOK, code)

	code, out, _ = cli(t, url, admin, runGroups)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "TimeoutError: upstream took <n>ms")
	require.Contains(t, out, "orders")

	code, out, _ = cli(t, url, admin, runStats)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "6 pending")
	require.Contains(t, out, "orders: 4 × TimeoutError")

	code, out, _ = cli(t, url, admin, runStatus)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "billing")
	code, out, _ = cli(t, url, admin, runStatus, "--json")
	require.Equal(t, exitOK, code)
	require.True(t, json.Valid([]byte(out)))

	// ack: by ids, a filter above the threshold needs --yes, dry run counts.
	code, out, _ = cli(t, url, admin, runActionCmd("ack"), fmt.Sprint(ids[0]))
	require.Equal(t, exitOK, code, out)
	code, out, _ = cli(t, url, admin, runActionCmd("ack"), "--queue", "orders", "--dry-run")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "dry run: 3 messages would be acknowledged")
	code, _, errOut = cli(t, url, admin, runActionCmd("ack"), "--queue", "orders", "--status", "all")
	require.Equal(t, exitOK, code, errOut)
	code, _, errOut = cli(t, url, admin, runActionCmd("rm"), "--status", "all")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--yes")
	code, out, _ = cli(t, url, admin, runActionCmd("rm"), "--status", "all", "--yes")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "6 messages deleted")
	var left int
	require.NoError(t, st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM dead_messages`).Scan(&left))
	require.Zero(t, left)

	// Exit codes that mean something.
	code, _, _ = cli(t, url, admin, runShow, fmt.Sprint(ids[0]))
	require.Equal(t, exitNotFound, code)
	code, _, _ = cli(t, url, admin, runActionCmd("rm"), fmt.Sprint(ids[0]))
	require.Equal(t, exitNotFound, code)
	code, _, errOut = cli(t, url, "", runLs)
	require.Equal(t, exitDenied, code)
	require.Contains(t, errOut, "DLQ_TOKEN")
	code, _, _ = cli(t, url, "wrong", runStats)
	require.Equal(t, exitDenied, code)
	code, _, _ = cli(t, url, "cli-viewer-token", runActionCmd("ack"), "1")
	require.Equal(t, exitDenied, code)
	code, _, _ = cli(t, url, admin, runLs, "--status", "bogus")
	require.Equal(t, exitUsage, code)
	code, _, _ = cli(t, url, admin, runLs, "--after", "last tuesday")
	require.Equal(t, exitUsage, code)
	code, _, _ = cli(t, url, admin, runLs, "--no-such-flag")
	require.Equal(t, exitUsage, code)
	code, _, _ = cli(t, url, admin, runShow)
	require.Equal(t, exitUsage, code)
	code, _, _ = cli(t, url, admin, runActionCmd("ack"))
	require.Equal(t, exitUsage, code)
	code, _, errOut = cli(t, "http://127.0.0.1:1", admin, runStatus)
	require.Equal(t, exitUnavailable, code)
	require.Contains(t, errOut, "cannot reach dlq")
}

// runActionCmd binds runAction to a command name.
func runActionCmd(name string) func([]string, cliEnv) int {
	return func(args []string, env cliEnv) int { return runAction(name, args, env) }
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 12: "12", 1204: "1,204", 1234567: "1,234,567", -1000: "-1,000"} {
		require.Equal(t, want, thousands(n))
	}
}
