package console_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// apiStatus reads GET /api/v1/status with token: what the overview must
// agree with.
func (b *bundle) apiStatus(t *testing.T, token string) map[string]int64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/api/v1/status", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out struct {
		Queues []struct {
			SourceQueue string `json:"source_queue"`
			Counts      struct {
				Pending int64 `json:"pending"`
			} `json:"counts"`
		} `json:"queues"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	m := map[string]int64{}
	for _, q := range out.Queues {
		m[q.SourceQueue] = q.Counts.Pending
	}
	return m
}

// overviewCounts reads the overview's pending count per queue.
func (tb *tab) overviewCounts(t *testing.T) map[string]int64 {
	t.Helper()
	tb.do(t, chromedp.Navigate(tb.b.srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.CSS(`[data-test="queue-row"]`)))
	queues := tb.attrs(t, `[data-test="queue-row"]`, "data-queue")
	counts := tb.texts(t, `[data-test="queue-row"] [data-test="pending-count"]`)
	require.Len(t, counts, len(queues))
	m := map[string]int64{}
	for i, q := range queues {
		n, err := strconv.ParseInt(strings.ReplaceAll(counts[i], ",", ""), 10, 64)
		require.NoError(t, err, counts[i])
		m[q] = n
	}
	return m
}

// TestBrowserSignInOverview: sign in through the form; the overview's
// counts per queue are the API's.
func TestBrowserSignInOverview(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, append(many(3, "orders"), many(2, "billing")...)...)
	tb := newTab(t, b)
	tb.signIn(t, tokViewer)
	got := tb.overviewCounts(t)
	require.Equal(t, map[string]int64{"orders": 3, "billing": 2}, got)
	require.Equal(t, b.apiStatus(t, tokViewer), got)
	require.Len(t, tb.texts(t, `svg.chart`), 2, "a 24 h chart per queue")
	tb.quiet(t)
}

// TestBrowserHostileContentIsInert: a body, a header and a failure message
// carrying <script> and <img onerror> run nothing (no dialog, no console
// error, no CSP report) and show as text.
func TestBrowserHostileContentIsInert(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const script, img = `<script>alert("body")</script>`, `<img src=x onerror=alert("img")>`
	ids := b.seed(t, msg{queue: "orders<b>", failureType: `<img src=x onerror=alert("type")>`, failureMessage: `failed: <script>alert("fail")</script>`,
		body:    []byte(`{"note":"` + strings.ReplaceAll(script+img, `"`, `\"`) + `"}`),
		headers: `{"x-evil":"` + strings.ReplaceAll(img, `"`, `\"`) + `","x-script":"` + strings.ReplaceAll(script, `"`, `\"`) + `"}`})
	b.seed(t, msg{queue: "text", failureType: "E", failureMessage: "m", body: []byte(script + img)})
	tb := newTab(t, b)
	tb.signIn(t, tokAdmin)

	id := strconv.FormatInt(ids[0], 10)
	tb.do(t, chromedp.Navigate(b.srv.URL+"/ui/messages/"+id), chromedp.WaitVisible(chromedp.CSS(`[data-test="body"]`)))
	body := tb.texts(t, `[data-test="body"]`)
	require.Len(t, body, 1)
	require.Contains(t, body[0], `<script>alert(\"body\")</script>`, "the body shows as text")
	require.Contains(t, body[0], `<img src=x onerror=alert(\"img\")>`)
	headers := strings.Join(tb.texts(t, `[data-test="header-row"]`), "\n")
	require.Contains(t, headers, img)
	require.Contains(t, headers, script)
	require.Zero(t, get(t, tb, chromedp.Evaluate[int](`document.querySelectorAll("main script, main img, body > img").length`)), "no element came from a message")

	for _, path := range []string{"/ui/messages?status=all", "/ui/", "/ui/groups", "/ui/messages/" + strconv.FormatInt(ids[0]+1, 10)} {
		tb.do(t, chromedp.Navigate(b.srv.URL+path), chromedp.WaitVisible(chromedp.CSS(`main h1`)))
		require.Zero(t, get(t, tb, chromedp.Evaluate[int](`document.querySelectorAll("main script, main img").length`)), path)
	}
	require.Contains(t, strings.Join(tb.texts(t, `[data-test="body"]`), ""), script+img, "a text body shows as text")
	tb.quiet(t)
}

// TestBrowserSignOut: after signing out, pages lead to the sign-in form.
func TestBrowserSignOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.do(t, click(`[data-test="sign-out"]`), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))
	tb.do(t, chromedp.Navigate(b.srv.URL+"/ui/messages"), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))
	require.Empty(t, tb.texts(t, `[data-test="sign-out"]`))
	tb.quiet(t)
}
