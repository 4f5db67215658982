// Package clitest runs a live dlq API for the tests of the operator
// commands: in-process ones (package cli) and those of the dlq binary
// (cmd/dlq).
package clitest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// Tokens the server accepts.
const (
	AdminToken    = "cli-admin-token"
	ViewerToken   = "cli-viewer-token"
	OperatorToken = "cli-operator-token"
)

// Server runs the real API on a loopback port over a fresh schema with
// a few dead messages (Seeded), and returns its URL, its store, the
// schema's database URL (for dlqtest.DB) and the stored ids.
func Server(t *testing.T) (url string, st *store.Store, dsn string, ids []int64) {
	t.Helper()
	st, dsn, ids = Seeded(t)
	return Serve(t, st, nil), st, dsn, ids
}

// Serve runs the real API over st on a loopback port until the test ends,
// and returns its URL. It takes AdminToken and ViewerToken, and asks for
// confirmation of a filter above three messages. cron, when not nil,
// serves the jobs and alerts routes.
func Serve(t *testing.T, st *store.Store, cron ops.CronViews) string {
	return ServeWith(t, st, cron, nil)
}

// ServeWith is Serve with the operations layer's configuration changed by
// tweak (approval, a replay service, ...). It also takes OperatorToken.
func ServeWith(t *testing.T, st *store.Store, cron ops.CronViews, tweak func(*ops.Config)) string {
	t.Helper()
	return serve(t, operations(t, st, cron, tweak), nil)
}

// ServeTLS is Serve over HTTPS, with a certificate for 127.0.0.1 of its own
// CA, and returns the URL and a PEM file of that CA (for --ca-file).
func ServeTLS(t *testing.T, st *store.Store) (url, caFile string) {
	t.Helper()
	cert, caPEM := certificate(t)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	return "https://" + strings.TrimPrefix(serve(t, operations(t, st, nil, nil), tc), "http://"), caFile
}

// authenticator takes AdminToken, ViewerToken and OperatorToken.
func authenticator(t *testing.T) *auth.Authenticator {
	t.Helper()
	authn, err := auth.New(auth.Config{
		AdminToken: AdminToken,
		Tokens: []auth.Token{{Name: "viewer", Token: ViewerToken, Role: auth.RoleViewer},
			{Name: "operator", Token: OperatorToken, Role: auth.RoleOperator}},
	})
	require.NoError(t, err)
	return authn
}

// Principals are the principals of the tokens Serve takes, for
// ops.Config.Principals (who may approve), as dlq serve configures it.
func Principals(t *testing.T) func() []auth.Principal {
	t.Helper()
	return authenticator(t).Principals
}

// operations is the operations layer over st: confirmation above three
// messages, cron's views when cron is not nil, changed by tweak.
func operations(t *testing.T, st *store.Store, cron ops.CronViews, tweak func(*ops.Config)) *ops.Service {
	t.Helper()
	oc := ops.Config{Store: st, ConfirmAbove: 3}
	if cron != nil {
		oc.Cron = cron
	}
	if tweak != nil {
		tweak(&oc)
	}
	o, err := ops.New(oc)
	require.NoError(t, err)
	return o
}

// serve runs the real API over o on a loopback port until the test ends
// (over TLS with tc), and returns its http:// URL.
func serve(t *testing.T, o *ops.Service, tc *tls.Config) string {
	t.Helper()
	srv, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: o, Auth: authenticator(t), TLS: tc,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String()
}

// certificate makes a CA and a server certificate for 127.0.0.1 it signs;
// it returns the latter and the CA's PEM.
func certificate(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		return k
	}
	caKey, key := newKey(), newKey()
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "clitest CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// Control runs the real control queue over st on a fresh queue of the test
// broker until the test ends, taking the tokens of Serve, with the
// operations layer of ServeWith (tweak), and returns the queue's name.
func Control(t *testing.T, st *store.Store, tweak func(*ops.Config)) string {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "clitest", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	app := dlqtest.Dial(t)
	queue := dlqtest.Name(t, "ctl")
	dlqtest.DeleteQueues(t, app, queue)
	c, err := control.New(control.Config{Conn: conn, Queue: queue, Ops: operations(t, st, nil, tweak), Commands: st,
		Auth: authenticator(t), Logger: quiet, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	// Wait until the queue is declared and consumed: a command sent
	// sooner would wait for no one.
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		ch, err := app.Channel()
		if err != nil {
			return false
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		return err == nil && q.Consumers > 0
	}, "control queue %s not declared and consumed", queue)
	return queue
}

// Seeded opens a store on a fresh schema holding six pending dead
// messages, m-0 to m-5 (TimeoutError: "upstream took <n>ms"): four died
// in orders, two in billing. It returns the store, the schema's database
// URL (for dlqtest.DB) and the messages' ids, oldest first.
func Seeded(t *testing.T) (*store.Store, string, []int64) {
	t.Helper()
	st, dsn := dlqtest.Store(t)
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
		m := consumer.Convert(d, "dlq", time.Now())
		m.Fingerprint = int64(i + 1)
		batch.Messages = append(batch.Messages, m)
	}
	_, err := st.IngestBatch(context.Background(), batch)
	require.NoError(t, err)
	page, err := st.ListMessages(context.Background(), store.Filter{Status: "all"}, store.ListOptions{Limit: 10})
	require.NoError(t, err)
	ids := make([]int64, len(page.Messages))
	for i, m := range page.Messages {
		ids[len(ids)-1-i] = m.ID // oldest first
	}
	return st, dsn, ids
}
