package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The browser tests share one headless Chromium per package (started in
// TestMain); each test gets a fresh browser context of its own (cookies
// and storage included), so tests run in parallel without seeing each
// other's sessions.
var (
	browserCtx  context.Context
	browserSkip string
)

func TestMain(m *testing.M) {
	code := func() int {
		stop, err := startBrowser()
		if err != nil {
			browserSkip = err.Error()
		} else {
			defer stop()
		}
		return m.Run()
	}()
	os.Exit(code)
}

// chromiumPath finds Chromium; when it is missing and this is root with
// apt-get, it installs Debian's package first (as scripts/services.sh
// does), so the browser tests skip only where it cannot be had at all.
func chromiumPath() (string, error) {
	names := []string{"chromium", "chromium-browser", "google-chrome"}
	if p := os.Getenv("DLQ_TEST_CHROMIUM"); p != "" {
		names = []string{p}
	}
	find := func() string {
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p, nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil || os.Geteuid() != 0 {
		return "", fmt.Errorf("chromium is not installed and cannot be installed here (not root, or no apt-get): run 'sudo apt-get install -y chromium' or scripts/services.sh as root, or set DLQ_TEST_CHROMIUM")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"update"}, {"install", "-y", "chromium"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("chromium is not installed and apt-get %s failed: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if p := find(); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("chromium is still not found after apt-get install -y chromium")
}

func startBrowser() (func(), error) {
	path, err := chromiumPath()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dlq-console-chromium-")
	if err != nil {
		return nil, err
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 900),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelBrowser := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil {
		cancelBrowser()
		cancelAlloc()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	browserCtx = ctx
	return func() {
		cancelBrowser()
		cancelAlloc()
		_ = os.RemoveAll(dir)
	}, nil
}

// tab is one test's browser: its own browser context, and a record of
// every dialog, console error or warning, uncaught exception and browser
// log error (a CSP refusal is one) the page raised.
type tab struct {
	ctx    context.Context
	b      *bundle
	mu     sync.Mutex
	alarms []string
}

func newTab(t *testing.T, b *bundle) *tab {
	t.Helper()
	if browserCtx == nil {
		t.Skip("browser tests skipped: " + browserSkip)
	}
	ctx, cancel := chromedp.NewContext(browserCtx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	tb := &tab{ctx: ctx, b: b}
	messages := chromedp.Console(ctx) // opens the tab and subscribes
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.Type == chromedp.ConsoleException {
				tb.alarm(string(m.Type) + ": " + m.Text)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			tb.alarm("dialog: " + ev.Message)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return tb
}

func (tb *tab) alarm(s string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.alarms = append(tb.alarms, s)
}

// stepTimeout bounds each browser step.
const stepTimeout = 60 * time.Second

// do runs steps, failing the test on error.
func (tb *tab) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// get runs one action that returns a value.
func get[T any](t *testing.T, tb *tab, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(t, err)
	return v
}

// quiet requires that nothing alarming happened in the page.
func (tb *tab) quiet(t *testing.T) {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	require.Empty(t, tb.alarms, "the page raised dialogs, errors or CSP reports")
}

// signIn signs in through the form.
func (tb *tab) signIn(t *testing.T, token string) {
	t.Helper()
	tb.do(t,
		chromedp.Navigate(tb.b.srv.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-test="sign-out"]`)),
	)
}

// texts returns the text of every element matching the CSS selector sel
// (none is fine).
func (tb *tab) texts(t *testing.T, sel string) []string {
	t.Helper()
	return get(t, tb, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+strconv.Quote(sel)+`)).map(e => e.textContent.trim())`))
}

// attrs returns attribute name of every element matching sel.
func (tb *tab) attrs(t *testing.T, sel, name string) []string {
	t.Helper()
	return get(t, tb, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+strconv.Quote(sel)+`)).map(e => e.getAttribute(`+strconv.Quote(name)+`) || "")`))
}

// open navigates to a console path and waits for its heading.
func (tb *tab) open(t *testing.T, path string) {
	t.Helper()
	tb.do(t, chromedp.Navigate(tb.b.srv.URL+path), chromedp.WaitVisible(chromedp.CSS(`main h1`)))
}

// nodeGone is how the browser says a node found by a query was replaced
// before the next command reached it.
const nodeGone = "Could not find node with given id"

// click clicks the first element matching the CSS selector sel. A page
// whose auto-refresh swapped that element between the query and the
// click is asked again: the error comes before the mouse events are
// sent, so nothing was clicked twice.
func click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for try := 1; ; try++ {
			_, err := chromedp.Click(chromedp.CSS(sel))(ctx, t)
			if err == nil || try == 3 || !strings.Contains(err.Error(), nodeGone) {
				return err
			}
		}
	})
}

// submit clicks the element sel, which submits a form, and waits for the
// page that answers; it returns the answer's HTTP status.
func (tb *tab) submit(t *testing.T, sel string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, stepTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, click(sel))
	require.NoError(t, err, "click %s", sel)
	require.NotNil(t, resp, "click %s loaded no page", sel)
	tb.do(t, chromedp.WaitVisible(chromedp.CSS(`main h1`)))
	return resp.Status
}

// eventually waits until the JavaScript expression js is true.
func (tb *tab) eventually(t *testing.T, timeout time.Duration, js, msg string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if get(t, tb, chromedp.Evaluate[bool](js)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s (%s)", timeout, msg, js)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// flash is the text of the page's flash, "" without one.
func (tb *tab) flash(t *testing.T) string {
	t.Helper()
	return strings.Join(tb.texts(t, `[data-test="flash"]`), " ")
}

// count is how many elements match sel.
func (tb *tab) count(t *testing.T, sel string) int {
	t.Helper()
	return get(t, tb, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
}
