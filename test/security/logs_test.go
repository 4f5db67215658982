package security

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
)

// TestSecretsNeverLogged: keys (from a file), tokens (from files, and a
// wrong one sent by a client), and URLs with passwords (PostgreSQL's from a
// file, the management API's, RabbitMQ's) never appear in anything dlq
// writes, at debug level, through a start, API calls and console
// sign-ins with right and wrong tokens, control commands, a failing
// management API and a rekey. A key file readable by others is refused.
func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	secret := func(name string) string { return name + "-" + strings.ToUpper(rand.Text()[:16]) }
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	adminTok, opsTok, wrongTok := secret("ADMINTOK"), secret("OPSTOK"), secret("WRONGTOK")
	pgPW, mgmtPW := secret("PGPW"), secret("MGMTPW")
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(d.dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content+"\n"), mode))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	keys := file("keys", "# rotated\n"+k2+"\n"+k1, 0o600)
	dbURL := strings.Replace(d.dsn, "postgres://postgres@", "postgres://postgres:"+url.QueryEscape(pgPW)+"@", 1)
	require.NotEqual(t, d.dsn, dbURL)
	require.NoError(t, os.WriteFile(d.config, []byte(`
api:
  tokens:
    - {name: ops, token_file: `+file("ops-token", opsTok, 0o400)+`, role: operator}
`), 0o600))
	env := map[string]string{
		"DLQ_LOG_LEVEL":            "debug",
		"DLQ_ENCRYPTION_KEYS_FILE": keys,
		"DLQ_ADMIN_TOKEN":          "",
		"DLQ_ADMIN_TOKEN_FILE":     file("admin-token", adminTok, 0o600),
		"DLQ_DATABASE_URL":         "",
		"DLQ_DATABASE_URL_FILE":    file("db-url", dbURL, 0o600),
		"DLQ_MANAGEMENT_URL":       "http://dlq:" + mgmtPW + "@" + freeAddr(t) + "/",
		"DLQ_MANAGEMENT_INTERVAL":  "1s",
		"DLQ_CRON_DISABLED":        "false",
	}
	for k, v := range env {
		d.env[k] = v
	}

	// A key file others may read is refused, naming the file only.
	open := file("keys-open", k1, 0o644)
	out, code := d.run(map[string]string{"DLQ_ENCRYPTION_KEYS_FILE": open}, "serve")
	require.NotEqual(t, 0, code)
	require.Contains(t, out, "keys-open has mode 0644")

	d.serve(nil)
	for _, tok := range []string{adminTok, opsTok, wrongTok} {
		d.get(tok, "/api/v1/messages")
		d.get(tok, "/api/v1/status")
		resp, err := http.PostForm("http://"+d.httpAddr+"/ui/sign-in", url.Values{"token": {tok}})
		if err == nil {
			resp.Body.Close()
		}
	}
	for _, tok := range []string{opsTok, wrongTok} {
		cc, err := control.Dial(context.Background(), dlqtest.AMQPURL(), d.control, tok)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = cc.Call(ctx, control.Command{Command: control.CmdListReplays})
		cancel()
		require.NoError(t, err)
		cc.Close()
	}
	// The failing management API is tried (and logged) a few times.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.logText(), "management") && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	require.Contains(t, d.logText(), "management", "the management check ran and failed")
	d.stop()
	out, code = d.run(nil, "rekey")
	require.Equal(t, 0, code, out)
	out, code = d.run(nil, "rekey", "-status")
	require.Equal(t, 0, code, out)

	logs := d.logText()
	require.Contains(t, logs, "level=DEBUG", "written at debug level")
	require.Contains(t, logs, "xxxxx", "URLs with passwords were logged, hidden")
	never := []string{adminTok, opsTok, wrongTok, pgPW, url.QueryEscape(pgPW), mgmtPW, ":guest@"}
	for _, k := range []string{k1, k2} {
		s := strings.SplitN(k, ":", 2)[1]
		never = append(never, s, s[:12], s[len(s)-12:])
	}
	for _, s := range never {
		require.NotContains(t, logs, s, "a secret in the log")
	}
	fmt.Fprintln(os.Stderr, "scanned", len(logs), "bytes of dlq output")
}
