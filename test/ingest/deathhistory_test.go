package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/internal/proctest"
)

const testAdminToken = "ingest-test-admin-token"

// apiCall sends a request with the admin token to the running dlq's HTTP
// API and decodes a JSON answer into out (when not nil).
func (h *harness) apiCall(method, path string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+h.httpAddr+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s %s answer %q: %w", method, path, b, err)
		}
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s answered %d: %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, nil
}

// apiMessage is the part of the API's message JSON this test reads.
type apiMessage struct {
	ID           int64  `json:"id"`
	Status       string `json:"status"`
	Reason       string `json:"reason"`
	ReplayCount  int    `json:"replay_count"`
	FailedAt     string `json:"failed_at"`
	Body         string `json:"body"`
	DeathHistory []struct {
		FailedAt        string  `json:"failed_at"`
		Reason          string  `json:"reason"`
		DeathCount      int64   `json:"death_count"`
		DeadLetterQueue string  `json:"dead_letter_queue"`
		FailureMessage  *string `json:"failure_message"`
	} `json:"death_history"`
}

// storeRejected publishes pub (which names its MessageId) to the test's
// reject queue, whose rejecter dead-letters it, and returns the id dlq
// stored it under.
func (h *harness) storeRejected(ctx context.Context, pub amqp.Publishing) int64 {
	t := h.t
	t.Helper()
	ch := dlqtest.Channel(t, dlqtest.Dial(t))
	require.NoError(t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", h.rejectQueue, false, false, pub)
	require.NoError(t, err)
	ok, err := dc.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok, "publish confirmed")
	var id int64
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		return h.db.QueryRow(ctx, `SELECT id FROM dead_messages WHERE message_id = $1`, pub.MessageId).Scan(&id) == nil
	}, "the rejected message was never stored")
	return id
}

// TestDeathHistoryEndToEnd: a message rejected by its consumer is stored;
// replayed through the API it goes back to its queue, is rejected again and
// returns to its own record — pending, replay_count kept, the earlier death
// in death_history — twice over, with one record and the same body bytes
// throughout.
func TestDeathHistoryEndToEnd(t *testing.T) {
	h := newHarness(t)
	h.env["DLQ_ADMIN_TOKEN"] = testAdminToken
	h.env["DLQ_REPLAY_POLL_INTERVAL"] = "50ms"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := h.start()
	h.waitReady(p, 30*time.Second)
	h.rejecter(ctx)

	body := []byte("death history \x00\xff " + h.runID)
	id := h.storeRejected(ctx, amqp.Publishing{
		DeliveryMode: amqp.Persistent, MessageId: "death-history-" + h.runID, Body: body,
		Headers: amqp.Table{"x-exception-message": "first failure"},
	})

	get := func() apiMessage {
		t.Helper()
		var m apiMessage
		_, err := h.apiCall(http.MethodGet, fmt.Sprintf("/api/v1/messages/%d", id), nil, &m)
		require.NoError(t, err)
		return m
	}
	first := get()
	require.Equal(t, "pending", first.Status)
	require.Equal(t, "rejected", first.Reason)
	require.Empty(t, first.DeathHistory)
	deaths := []string{first.FailedAt}

	for round := 1; round <= 2; round++ {
		var task map[string]any
		_, err := h.apiCall(http.MethodPost, "/api/v1/replays", map[string]any{"ids": []int64{id}}, &task)
		require.NoError(t, err, "round %d: start replay", round)
		var m apiMessage
		dlqtest.Eventually(t, 30*time.Second, func() bool {
			m = get()
			return m.Status == "pending" && m.ReplayCount == round && len(m.DeathHistory) == round
		}, "round %d: the replayed message did not come back to its record: %+v (task %v)", round, &m, task)
		require.Equal(t, "rejected", m.Reason)
		for i, d := range m.DeathHistory {
			want, err1 := time.Parse(time.RFC3339Nano, deaths[i])
			got, err2 := time.Parse(time.RFC3339Nano, d.FailedAt)
			require.NoError(t, errors.Join(err1, err2))
			require.True(t, want.Equal(got), "round %d: death %d (%s) is the one replaced then (%s), oldest first", round, i, d.FailedAt, deaths[i])
			require.Equal(t, "rejected", d.Reason)
			require.Equal(t, h.queue, d.DeadLetterQueue)
			require.NotNil(t, d.FailureMessage)
			require.Equal(t, "first failure", *d.FailureMessage, "the application's headers travel with the replay")
		}
		require.NotEqual(t, deaths[len(deaths)-1], m.FailedAt, "round %d: the record holds the new death, not the old one", round)
		deaths = append(deaths, m.FailedAt)
	}

	var n int
	require.NoError(t, h.db.QueryRow(ctx, `SELECT count(*) FROM dead_messages`).Scan(&n))
	require.Equal(t, 1, n, "one record, however often it died")
	got, err := base64.StdEncoding.DecodeString(get().Body)
	require.NoError(t, err)
	require.Equal(t, sha256.Sum256(body), sha256.Sum256(got), "body bytes unchanged after two replays")
}

// TestReplayThatDiesInTwoQueues: a replay whose one publish the target
// exchange routes to two queues, both of which reject it, sends dlq two
// dead letters with the same x-dlq-id and x-dlq-replay-id. Both deaths
// return to the record: the second is the row's death, the first goes
// to death_history. The second was taken for a redelivery of the first,
// counted as a duplicate, acknowledged and never stored.
func TestReplayThatDiesInTwoQueues(t *testing.T) {
	h := newHarness(t)
	h.env["DLQ_ADMIN_TOKEN"] = testAdminToken
	h.env["DLQ_REPLAY_POLL_INTERVAL"] = "50ms"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The replay's target: a fanout exchange to two queues that
	// dead-letter to dlq, each with a consumer that rejects everything.
	conn := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, conn)
	fanout := dlqtest.Name(t, "fan")
	qa, qb := dlqtest.Name(t, "fan_a"), dlqtest.Name(t, "fan_b")
	require.NoError(t, ch.ExchangeDeclare(fanout, "fanout", false, true, false, false, nil))
	dlqtest.DeleteExchanges(t, conn, fanout)
	for _, q := range []string{qa, qb} {
		_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": h.exchange})
		require.NoError(t, err)
		require.NoError(t, ch.QueueBind(q, "", fanout, false, nil))
	}
	dlqtest.DeleteQueues(t, conn, qa, qb)

	p := h.start()
	h.waitReady(p, 30*time.Second)
	h.rejecter(ctx)
	proctest.Rejecter(ctx, dlqtest.AMQPURL(), qa)
	proctest.Rejecter(ctx, dlqtest.AMQPURL(), qb)

	id := h.storeRejected(ctx, amqp.Publishing{
		DeliveryMode: amqp.Persistent, MessageId: "two-queues-" + h.runID, Body: []byte("fan out " + h.runID),
	})

	_, err := h.apiCall(http.MethodPost, "/api/v1/replays", map[string]any{
		"ids": []int64{id}, "target": map[string]string{"exchange": fanout, "routing_key": ""},
	}, nil)
	require.NoError(t, err)
	var m apiMessage
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		_, err := h.apiCall(http.MethodGet, fmt.Sprintf("/api/v1/messages/%d", id), nil, &m)
		return err == nil && m.Status == "pending" && len(m.DeathHistory) == 2
	}, "both deaths of the replay's one publish did not return to the record: %+v", &m)
	require.Equal(t, "rejected", m.Reason)
	require.Equal(t, 1, m.ReplayCount)
	var rows int
	require.NoError(t, h.db.QueryRow(ctx, `SELECT count(*) FROM dead_messages`).Scan(&rows))
	require.Equal(t, 1, rows, "one record")
	dup, err := h.metric("dlq_messages_duplicate_total")
	require.NoError(t, err)
	require.Zero(t, dup, "neither death was taken for a duplicate")
}
