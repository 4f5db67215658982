//go:build tls

package tls

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
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

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/proctest"
)

var (
	srv    *servers
	dlqBin string
	// encKey is the encryption key of every dlq run here: they share the
	// cluster's database, whose index key it wraps.
	encKey = newKey()
)

func TestMain(m *testing.M) {
	ctx := context.Background()
	var err error
	srv, err = startServers(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the TLS servers:", err)
		srv.stop()
		os.Exit(1)
	}
	code := proctest.RunWithDLQ(m, &dlqBin)
	srv.stop()
	os.Exit(code)
}

const adminToken = "tls-admin-token-7c2f"

// proc is a dlq process and its output.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	exited chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func newKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "k1:" + base64.StdEncoding.EncodeToString(b)
}

// env is a dlq process's environment on the TLS servers.
func env(t *testing.T, httpAddr string, extra map[string]string) []string {
	t.Helper()
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLQ_") {
			out = append(out, kv)
		}
	}
	vars := map[string]string{
		"DLQ_AMQP_URL":         srv.amqpsURL(),
		"DLQ_AMQP_CA_FILE":     srv.caFile,
		"DLQ_AMQP_CERT_FILE":   srv.clientCert,
		"DLQ_AMQP_KEY_FILE":    srv.clientKey,
		"DLQ_AMQP_SERVER_NAME": "localhost",
		"DLQ_DATABASE_URL":     srv.pgURL(srv.caFile),
		"DLQ_HTTP_ADDR":        httpAddr,
		"DLQ_ADMIN_TOKEN":      adminToken,
		"DLQ_ENCRYPTION_KEYS":  encKey,
		"DLQ_LOG_LEVEL":        "debug",
		"DLQ_CRON_DISABLED":    "true",
		"DLQ_QUEUES":           "dlq_" + strings.ToLower(t.Name()),
		"DLQ_CONTROL_QUEUE":    "ctl_" + strings.ToLower(t.Name()),
	}
	for k, v := range extra {
		vars[k] = v
	}
	for k, v := range vars {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

func start(t *testing.T, httpAddr string, extra map[string]string, args ...string) *proc {
	t.Helper()
	p := &proc{exited: make(chan struct{})}
	p.cmd = exec.Command(dlqBin, args...)
	p.cmd.Env = env(t, httpAddr, extra)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				_ = p.cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("dlq %v output:\n%s", args, p.output())
		}
	})
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// httpsClient trusts the test CA.
func httpsClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.ca.pem)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// servedSerial is the serial number of the certificate served at addr.
func servedSerial(addr string) (*big.Int, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.ca.pem)
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestServeOverTLS: dlq connects to RabbitMQ over amqps (CA, client
// certificate, server name) and to PostgreSQL with verify-full, serves
// HTTPS, stores a dead letter and shows it, reloads its certificate on
// SIGHUP, and never logs a password, a token or a key.
func TestServeOverTLS(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, sn1, err := srv.ca.issue("localhost", true)
	require.NoError(t, err)
	certFile, keyFile, err := writeFiles(dir, "http", certPEM, keyPEM)
	require.NoError(t, err)
	addr := freeAddr(t)
	extra := map[string]string{"DLQ_TLS_CERT": certFile, "DLQ_TLS_KEY": keyFile, "DLQ_TLS_RELOAD_INTERVAL": "1h"}
	p := start(t, addr, extra, "serve")
	hc := httpsClient()
	waitFor(t, "readiness over HTTPS", 90*time.Second, func() bool {
		resp, err := hc.Get("https://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	got, err := servedSerial(addr)
	require.NoError(t, err)
	require.Equal(t, sn1, got)

	// Plain HTTP is not served.
	resp, err := http.Get("http://" + addr + "/healthz")
	if err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "an HTTP request to the HTTPS port")
	}

	// A dead letter through the TLS broker is stored and read over HTTPS.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.ca.pem)
	cert, err := tls.LoadX509KeyPair(srv.clientCert, srv.clientKey)
	require.NoError(t, err)
	conn, err := amqp.DialTLS(srv.amqpsURL(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "localhost"})
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Publish("dlx", "orders", false, false, amqp.Publishing{MessageId: "over-tls", Body: []byte(`{"x":1}`),
		Headers: amqp.Table{"x-death": []any{amqp.Table{"count": int64(1), "reason": "rejected", "queue": "orders", "exchange": "", "time": time.Now()}}}}))
	waitFor(t, "the message over HTTPS", 60*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/api/v1/messages?include_body=true", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"message_id":"over-tls"`)
	})

	// Both of dlq's connections are TLS.
	pg, err := pgx.Connect(context.Background(), srv.pgURL(srv.caFile))
	require.NoError(t, err)
	defer pg.Close(context.Background())
	var plain int
	require.NoError(t, pg.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.usename = 'dlq' AND NOT s.ssl`).Scan(&plain))
	require.Zero(t, plain, "every connection of dlq's user is TLS")
	lc := exec.Command(filepath.Join(rabbitBinDir, "rabbitmqctl"), "-n", rabbitNode, "list_connections", "user", "ssl", "--silent")
	lc.Env = srv.rabbitEnv()
	out, err := lc.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "dlq\ttrue")
	require.NotContains(t, string(out), "dlq\tfalse")

	// The CLI reaches the HTTPS API with the CA, and not without it.
	cli := func(ca string) (string, error) {
		c := exec.Command(dlqBin, "status")
		c.Env = env(t, addr, map[string]string{"DLQ_URL": "https://" + addr, "DLQ_TOKEN": adminToken, "DLQ_CA_FILE": ca})
		b, err := c.CombinedOutput()
		return string(b), err
	}
	o, err := cli(srv.caFile)
	require.NoError(t, err, o)
	o, err = cli(srv.wrongCAFile)
	require.Error(t, err)
	require.Contains(t, o, "certificate")

	// A new certificate, read on SIGHUP (the reload interval is an hour).
	certPEM, keyPEM, sn2, err := srv.ca.issue("localhost", true)
	require.NoError(t, err)
	_, _, err = writeFiles(dir, "http", certPEM, keyPEM)
	require.NoError(t, err)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, "the new certificate", 10*time.Second, func() bool {
		got, err := servedSerial(addr)
		return err == nil && got.Cmp(sn2) == 0
	})
	// The log line follows the swap: wait for it rather than race it.
	waitFor(t, "the reload logged", 10*time.Second, func() bool { return strings.Contains(p.output(), "TLS certificate reloaded") })

	// A broken pair keeps the certificate in use.
	require.NoError(t, os.WriteFile(keyFile, []byte("not a key"), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, "the refused reload", 10*time.Second, func() bool { return strings.Contains(p.output(), "TLS certificate not reloaded") })
	got, err = servedSerial(addr)
	require.NoError(t, err)
	require.Equal(t, sn2, got)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	<-p.exited
	logs := p.output()
	for _, s := range []string{srv.rabbitPW, srv.pgPW, adminToken} {
		require.NotContains(t, logs, s, "a secret in the log")
	}
	var keys []string
	for _, kv := range p.cmd.Env {
		if v, ok := strings.CutPrefix(kv, "DLQ_ENCRYPTION_KEYS=k1:"); ok {
			keys = append(keys, v, v[:12])
		}
	}
	for _, k := range keys {
		require.NotContains(t, logs, k)
	}
}

// TestWrongCAs: a PostgreSQL certificate not signed by the CA dlq is
// given stops dlq at start, saying so; a RabbitMQ one is logged as such
// while dlq retries (not ready); RabbitMQ refusing a connection without a
// client certificate is logged as such.
func TestWrongCAs(t *testing.T) {
	out, err := run(t, map[string]string{"DLQ_DATABASE_URL": srv.pgURL(srv.wrongCAFile)}, "serve")
	require.Error(t, err)
	require.Contains(t, out, "cannot connect to PostgreSQL over TLS: the server's certificate is not signed by a CA dlq trusts")
	require.NotContains(t, out, srv.pgPW)

	for _, c := range []struct {
		extra map[string]string
		want  string
	}{
		{map[string]string{"DLQ_AMQP_CA_FILE": srv.wrongCAFile}, "the server's certificate is not signed by a CA dlq trusts"},
		{map[string]string{"DLQ_AMQP_CERT_FILE": "", "DLQ_AMQP_KEY_FILE": ""}, "the server refused the TLS handshake"},
	} {
		addr := freeAddr(t)
		p := start(t, addr, c.extra, "serve")
		waitFor(t, c.want, 60*time.Second, func() bool { return strings.Contains(p.output(), c.want) || !alive(p) })
		require.Contains(t, p.output(), c.want)
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		}
		require.NotContains(t, p.output(), srv.rabbitPW)
	}
}

func alive(p *proc) bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// run runs a dlq command to its end.
func run(t *testing.T, extra map[string]string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, dlqBin, args...)
	c.Env = env(t, freeAddr(t), extra)
	b, err := c.CombinedOutput()
	return string(b), err
}
