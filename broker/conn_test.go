package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
)

// logRecords keeps a Conn's log lines for the test to read.
type logRecords struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logRecords) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// lines returns "msg url" for each record, in order.
func (l *logRecords) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var r struct{ Msg, URL string }
		if json.Unmarshal([]byte(line), &r) == nil {
			out = append(out, r.Msg+" "+r.URL)
		}
	}
	return out
}

// A Conn given several URLs connects to the first that answers and, when
// that connection is lost, dials the next one first: a node that closed
// its connections may be going down. One that answers nowhere tries every
// URL before it backs off.
func TestConnFailsOverBetweenURLs(t *testing.T) {
	t.Parallel()
	const dead = "amqp://guest:guest@127.0.0.1:1/"
	live := dlqtest.AMQPURL()
	u, err := url.Parse(live)
	require.NoError(t, err)
	shown := u.Redacted()
	logs := &logRecords{}
	name := dlqtest.Name(t, "conn")
	conn, err := broker.NewConn(broker.ConnConfig{
		URL: live + "," + dead, Name: name, MinBackoff: 10 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	waitConnected := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ch, err := conn.Channel(ctx)
		require.NoError(t, err)
		_ = ch.Close()
	}
	waitConnected()
	require.Equal(t, []string{"connected to RabbitMQ " + shown}, logs.lines())

	require.NoError(t, dlqtest.CloseConnection(name))
	dlqtest.Eventually(t, 30*time.Second, func() bool { return len(logs.lines()) >= 4 },
		"no reconnection after the broker closed the connection: %v", logs.lines())
	waitConnected()
	require.Equal(t, []string{
		"connected to RabbitMQ " + shown,
		"RabbitMQ connection lost; reconnecting ",
		"cannot connect to RabbitMQ; trying the next node amqp://guest:xxxxx@127.0.0.1:1/",
		"connected to RabbitMQ " + shown,
	}, logs.lines()[:4])
}

func TestConnTriesEveryURLBeforeBackingOff(t *testing.T) {
	t.Parallel()
	logs := &logRecords{}
	conn, err := broker.NewConn(broker.ConnConfig{
		URL: "amqp://127.0.0.1:1/,amqp://127.0.0.1:2/", MinBackoff: time.Hour,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	dlqtest.Eventually(t, 30*time.Second, func() bool { return len(logs.lines()) >= 2 }, "no dial attempts logged")
	require.Equal(t, []string{
		"cannot connect to RabbitMQ; trying the next node amqp://127.0.0.1:1/",
		"cannot connect to RabbitMQ; retrying amqp://127.0.0.1:2/",
	}, logs.lines())
	ok, err := conn.Connected()
	require.False(t, ok)
	require.ErrorContains(t, err, "127.0.0.1:2")
}
