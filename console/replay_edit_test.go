package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// TestFailedEditReplayOffersTheEditNotAReplay: the task of an edit whose
// corrected copy was not sent (its queue is not there) says on its page
// that it sent a corrected copy of the message, and offers no "Replay the
// failed again": that would send the original, uncorrected body. It
// points to editing the message again instead.
func TestFailedEditReplayOffersTheEditNotAReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.live = true })
	queue := dlqtest.Name(t, "absent") // never declared: the copy is unroutable
	id := strconv.FormatInt(b.seed(t, msg{queue: queue, body: []byte(`{"sku":"A"}`)})[0], 10)
	op := b.signIn(t, tokOp)
	r := op.act(t, "/ui/messages/"+id+"/edit", url.Values{"binary": {"0"}, "body": {`{"sku":"B"}`}, "send": {"1"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	var page response
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		page = op.get(t, "/ui/messages/"+id)
		return regexp.MustCompile(`data-test="edit-state" data-state="failed"`).MatchString(page.text)
	}, "the copy is not sent")
	task := regexp.MustCompile(`href="/ui/replays/(\d+)"`).FindStringSubmatch(page.text)
	require.NotNil(t, task, "the edit note links its replay")

	// The copy's failure is recorded before its task finishes: the notice
	// comes with the finished task.
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		r = op.get(t, "/ui/replays/"+task[1])
		return r.StatusCode == http.StatusOK && len(elementWords(r.text, "replay-edit-not-sent")) > 0
	}, "the finished task's page says the copy was not sent")
	require.Equal(t, "a corrected copy of message #"+id+" (edit and replay)", elementWords(r.text, "replay-source")[0])
	require.NotContains(t, r.text, `data-test="replay-again"`, "replaying the failed again would send the original")
	notice := elementWords(r.text, "replay-edit-not-sent")
	require.Len(t, notice, 1)
	require.Contains(t, notice[0], "Replaying it would send the original, uncorrected")
	require.Contains(t, r.text, `<a href="/ui/messages/`+id+`">edit message #`+id+`</a>`)
}

// TestMessageTimelineSaysWhenAScheduledReplayStarts: a message in a
// replay scheduled to start later says on its timeline when that replay
// starts, not "scheduled" alone: the on-call engineer sees it is already
// on its way, and when.
func TestMessageTimelineSaysWhenAScheduledReplayStarts(t *testing.T) {
	t.Parallel()
	b := setup(t) // no replay runner: the task stays scheduled
	id := strconv.FormatInt(b.seed(t, msg{queue: "orders"})[0], 10)
	op := b.signIn(t, tokOp)
	r := op.act(t, "/ui/act", url.Values{"action": {"replay"}, "id": {id}, "delay": {"600"}, "back": {"/ui/messages/" + id}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	events := elementWords(op.get(t, "/ui/messages/"+id).text, "replay-event")
	require.Len(t, events, 1)
	require.Regexp(t, `: scheduled to start \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC \(in 10 min\)$`, events[0])
}
