package console_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// deadLetterQueue declares an application queue that dead-letters, through
// the default exchange, into a queue standing for dlq's own: a message
// rejected from the first arrives in the second with the x-death RabbitMQ
// writes. Both are deleted when the test ends.
func deadLetterQueue(t *testing.T, app *amqp.Connection) (appQueue, dlqQueue string) {
	t.Helper()
	ch := dlqtest.Channel(t, app)
	dlqQueue = dlqtest.Name(t, "dlq")
	_, err := ch.QueueDeclare(dlqQueue, true, false, false, false, nil)
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, app, dlqQueue)
	appQueue = dlqtest.SourceQueue(t, app, ch, "", "classic", amqp.Table{"x-dead-letter-routing-key": dlqQueue})
	return appQueue, dlqQueue
}

// diedInItsQueue publishes one JSON message with headers to a new
// application queue (deadLetterQueue), whose consumer rejects it, and
// stores the dead letter: the message's id, and the queues to make it die
// again.
func (b *bundle) diedInItsQueue(t *testing.T, app *amqp.Connection, headers amqp.Table) (appQueue, dlqQueue string, id int64) {
	t.Helper()
	appQueue, dlqQueue = deadLetterQueue(t, app)
	ch := dlqtest.Channel(t, app)
	require.NoError(t, ch.PublishWithContext(context.Background(), "", appQueue, false, false,
		amqp.Publishing{ContentType: "application/json", Body: []byte(`{"order":"A-1"}`), Headers: headers}))
	dlqtest.RejectAll(t, app, appQueue, 1)
	b.ingestFrom(t, app, dlqQueue)
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT id FROM dead_messages`).Scan(&id))
	return appQueue, dlqQueue, id
}

// ingestFrom takes one delivery from dlq's stand-in queue and stores it
// through the consumer's conversion and the store's ingest, as dlq's
// consumer does: a replayed message comes back to its own record.
func (b *bundle) ingestFrom(t *testing.T, app *amqp.Connection, dlqQueue string) {
	t.Helper()
	ch := dlqtest.Channel(t, app)
	var d amqp.Delivery
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		var ok bool
		var err error
		d, ok, err = ch.Get(dlqQueue, true)
		require.NoError(t, err)
		return ok
	}, "a dead letter in %s", dlqQueue)
	nm := consumer.Convert(&d, dlqQueue, time.Now().UTC())
	_, err := b.st.IngestBatch(context.Background(), store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: []store.NewMessage{nm}})
	require.NoError(t, err)
}

// TestBrowserDeathTimeline: a message rejected by its application, replayed
// from the console and rejected again shows, on its page, two deaths in
// the application's queue (not dlq's) with their reason, and the replay
// between them, linked to its task.
func TestBrowserDeathTimeline(t *testing.T) {
	t.Parallel()
	app := dlqtest.Dial(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	appQueue, dlqQueue, id := b.diedInItsQueue(t, app, amqp.Table{"x-exception-type": "OrderError"})
	page := "/ui/messages/" + strconv.FormatInt(id, 10)

	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, page)
	require.Equal(t, []string{appQueue}, tb.attrs(t, `[data-test="death-row"]`, "data-queue"), "the queue it died in")
	group := tb.attrs(t, `[data-test="message-group"]`, "href")
	require.Len(t, group, 1)
	require.True(t, strings.HasPrefix(group[0], "/ui/groups/"), "its group's page: %s", group[0])
	tb.submit(t, `[data-test="action-replay"]`)
	tb.submit(t, `[data-test="confirm"]`)
	dlqtest.RejectAll(t, app, appQueue, 1) // the application rejects it again
	b.ingestFrom(t, app, dlqQueue)

	tb.open(t, page)
	require.Equal(t, []string{appQueue, appQueue}, tb.attrs(t, `[data-test="death-row"]`, "data-queue"),
		"two deaths, each in the application's queue")
	require.Equal(t, []string{"rejected", "rejected"}, tb.attrs(t, `[data-test="death-row"]`, "data-reason"))
	require.Equal(t, 1, tb.count(t, `[data-test="replay-event"]`), "one replay")
	require.Equal(t, 1, tb.count(t, `[data-test="death-row"] + [data-test="replay-event"] + [data-test="death-row"]`),
		"the replay between the deaths")
	require.Equal(t, 1, tb.count(t, `[data-test="replay-event"] a[href^="/ui/replays/"]`), "linked to its task")
	require.Zero(t, tb.count(t, `[data-test="death-row"][data-queue="`+dlqQueue+`"]`), "never dlq's own queue")
	// One time format: every time on the timeline is a <time> with how long ago.
	require.Equal(t, 3, tb.count(t, `ol.timeline time`))
	require.Equal(t, 3, tb.count(t, `ol.timeline .ago`))
	tb.quiet(t)
}
