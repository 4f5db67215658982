package security

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/store"
)

func ring(t *testing.T, keys ...string) *crypt.Ring {
	t.Helper()
	ks, err := crypt.ParseKeys(strings.Join(keys, ","))
	require.NoError(t, err)
	r, err := crypt.NewRing(ks)
	require.NoError(t, err)
	return r
}

// seed stores n sealed messages under ring straight through the store
// (as ingest writes them), body "body-<i>".
func seed(t *testing.T, d *deployment, r *crypt.Ring, n int) {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{DatabaseURL: d.dsn, MaxConns: 2, Encryption: &store.Encryption{Ring: r}})
	require.NoError(t, err)
	defer st.Close()
	now := time.Now().UTC()
	var batch []store.NewMessage
	for i := range n {
		batch = append(batch, store.NewMessage{
			MessageID: fmt.Sprintf("m-%d", i), SourceQueue: "orders", DeadLetterQueue: d.queue, Reason: "rejected", DeathCount: 1,
			Properties: json.RawMessage(fmt.Sprintf(`{"message_id":"m-%d"}`, i)), Headers: json.RawMessage(`{"x-i":` + strconv.Itoa(i) + `}`),
			Body: []byte(fmt.Sprintf("body-%d", i)), FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i + 1), Returns: store.ReturnsUnknown,
		})
		if len(batch) == 500 || i == n-1 {
			_, err := st.IngestBatch(context.Background(), store.IngestBatch{ID: store.NewBatchID(), Consumer: "seed", Messages: batch})
			require.NoError(t, err)
			batch = batch[:0]
		}
	}
}

// keyCounts counts the messages under each key.
func keyCounts(t *testing.T, d *deployment) map[string]int {
	t.Helper()
	rows, err := basePool(t).Query(context.Background(), fmt.Sprintf(`SELECT coalesce(enc_key_id, ''), count(*) FROM %q.dead_messages GROUP BY 1`, d.schema))
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		require.NoError(t, rows.Scan(&k, &n))
		out[k] = n
	}
	require.NoError(t, rows.Err())
	return out
}

var progressRe = regexp.MustCompile(`rekey: (\d+)/(\d+) messages`)

// TestRotationRekeyKilledAndResumed: rows under an old key stay readable
// with both keys configured; the old key cannot be removed while rows use
// it (refused with the count); `dlq rekey` killed with SIGKILL in the
// middle leaves every row readable, under one key or the other; run
// again, it waits for the dead one's lease, finishes, and then the old
// key can go and every message reads back as it was stored.
func TestRotationRekeyKilledAndResumed(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	const n = 4000
	seed(t, d, ring(t, k1), n)

	// The new key in front: old rows are read with the old key.
	d.env["DLQ_ENCRYPTION_KEYS"] = k2 + "," + k1
	d.serve(nil)
	ms := d.messages(tokAdmin, "")
	require.Equal(t, fmt.Sprintf("body-%d", n-1), string(ms[0].Body))
	d.stop()

	// Removing k1 now is refused, with the count.
	out, code := d.run(map[string]string{"DLQ_ENCRYPTION_KEYS": k2}, "serve")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, fmt.Sprintf("encryption key k1 still wraps %d messages", n))

	// rekey, killed once it has done some of the work.
	p := d.start(nil, "rekey", "-batch", "10")
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := progressRe.FindAllStringSubmatch(p.output(), -1)
		if len(m) > 0 {
			if done, _ := strconv.Atoi(m[len(m)-1][1]); done > 0 {
				break
			}
		}
		require.False(t, p.done(), "rekey ended before it could be killed:\n%s", p.output())
		require.True(t, time.Now().Before(deadline), "no progress:\n%s", p.output())
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.exited
	counts := keyCounts(t, d)
	require.Equal(t, n, counts["k1"]+counts["k2"], "nothing lost: %v", counts)
	require.Greater(t, counts["k2"], 0, "%v", counts)
	require.Greater(t, counts["k1"], 0, "killed in the middle: %v", counts)

	// Every row reads, whichever key it is under.
	d.serve(nil)
	require.Len(t, d.messages(tokAdmin, ""), 1000)
	d.stop()

	// Run again: it waits for the killed one's lease and finishes.
	out, code = d.run(nil, "rekey", "-batch", "200")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "another rekey holds the job; waiting")
	require.Contains(t, out, "key k1 wraps nothing any more")
	require.Equal(t, map[string]int{"k2": n}, keyCounts(t, d))
	out, code = d.run(nil, "rekey", "-status")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `k2\s+active\s+4000\s+1\s+0\s+true`, out)

	// k1 removed: dlq starts, and every message is what was stored.
	d.env["DLQ_ENCRYPTION_KEYS"] = k2
	d.serve(nil)
	st, err := store.Open(context.Background(), store.Config{DatabaseURL: d.dsn, MaxConns: 2})
	require.NoError(t, err)
	defer st.Close()
	r2 := ring(t, k2)
	var before int64
	seen := 0
	for {
		page, err := st.ListMessages(context.Background(), store.Filter{Status: "all"}, store.ListOptions{Limit: 1000, Before: before, IncludeBody: true})
		require.NoError(t, err)
		for _, m := range page.Messages {
			body, err := r2.Open(m.Sealed.Envelope, store.MessageRef(m.ID), crypt.FieldBody, m.Sealed.Body)
			require.NoError(t, err, "message %d", m.ID)
			require.Equal(t, fmt.Sprintf("body-%d", m.ID-1), string(body))
			seen++
		}
		if !page.HasMore {
			break
		}
		before = page.LastID
	}
	require.Equal(t, n, seen)
	require.Len(t, d.messages(tokAdmin, "&q=m-17"), 1, "search keys survive rotation")
}
