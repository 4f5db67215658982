package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// pages holds every page's template: the layout plus the page's own file.
type pages struct {
	byName map[string]*template.Template
}

// pageFiles are the page templates under templates/, each parsed with
// layout.html and partials.html.
var pageFiles = []string{"signin", "error", "overview", "messages", "message", "confirm",
	"groups", "group", "replays", "replay", "jobs", "audit", "approvals", "edit", "gone"}

func parsePages() (*pages, error) {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/partials.html")
	if err != nil {
		return nil, fmt.Errorf("console: parse layout: %w", err)
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, name := range pageFiles {
		t, err := template.Must(base.Clone()).ParseFS(assets, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse page %s: %w", name, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// view is what every page's template receives.
type view struct {
	Title string
	// Page is the page's template name, which the navigation marks.
	Page string
	// Signed is true with a session; Name and Role are its token's.
	Signed     bool
	Name, Role string
	// Scope lists the queues a scoped token sees; nil: every queue.
	Scope []string
	CSRF  string
	Can   can
	Flash *flash
	Data  any
	// Approvals is how many requests wait for a decision the viewer may
	// give (the navigation's count); -1 when not known.
	Approvals int
	// RefreshURL is where the page's auto-refresh fetches it again (its
	// own address; "" for a page that is not refreshed, such as the answer
	// to a POST), and Live whether auto-refresh starts on ("on") or waits
	// to be turned on ("off").
	RefreshURL, Live string
	// Gone: this is the answer to an auto-refresh of a page whose subject
	// no longer exists (404); the script shows it in the page's place.
	Gone bool
}

// liveDefault says which pages refresh themselves (static/app.js every
// refreshSeconds) and whether that starts on: the pages one watches.
var liveDefault = map[string]string{
	"overview": "on", "replays": "on", "approvals": "on", "jobs": "on",
	"messages": "off", "groups": "off", "group": "off",
}

// refreshHeader marks the auto-refresh's own requests: they are answered
// with the page's content alone (template "fragment"), which the script
// swaps into the page's [data-refresh] containers.
const refreshHeader = "X-DLQ-Refresh"

// refreshDoneHeader, on the answer to an auto-refresh, says the page has
// nothing left to follow (its view no longer asks to be refreshed: a
// message's edited copy has settled): the script swaps this answer in and
// asks no more, instead of polling a page that will not change by itself.
const refreshDoneHeader = "X-DLQ-Refresh-Done"

// isRefresh reports whether r is an auto-refresh of a page.
func isRefresh(r *http.Request) bool {
	return r.Method == http.MethodGet && r.Header.Get(refreshHeader) == "1"
}

// can says which controls to show: what ops.Authorize allows the
// principal. The layer checks again whatever the page showed.
type can struct {
	Acknowledge, Replay, Cancel, Delete, Audit, Bodies, Edit, Decide bool
}

func (c *Console) newView(s *session, page, title string, data any) view {
	v := view{Title: title, Page: page, Data: data, Approvals: -1}
	if s != nil {
		p := s.principal
		v.Signed, v.Name, v.Role, v.Scope, v.CSRF, v.Flash = true, p.Name, p.Role, p.Queues, s.csrf, s.flash
		v.Can = can{
			Acknowledge: ops.Authorize(p, ops.ActAcknowledge) == nil,
			Replay:      ops.Authorize(p, ops.ActStartReplay) == nil,
			Cancel:      ops.Authorize(p, ops.ActCancelReplay) == nil,
			Delete:      ops.Authorize(p, ops.ActDelete) == nil,
			Audit:       ops.Authorize(p, ops.ActAudit) == nil,
			Bodies:      p.Bodies,
			Edit:        ops.Authorize(p, ops.ActEditReplay) == nil,
			Decide:      ops.Authorize(p, ops.ActDecideApproval) == nil,
		}
	}
	return v
}

// render writes a whole page. The page is rendered into a buffer first,
// so a template error becomes a clean 500, not half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, s *session, title string, data any) {
	v := c.newView(s, page, title, data)
	if live := liveDefault[page]; live != "" && r.Method == http.MethodGet && status == http.StatusOK {
		v.Live, v.RefreshURL = live, r.URL.RequestURI()
	}
	c.renderView(w, r, status, page, "layout", v)
}

// renderFragment writes one named template of a page with data, for htmx
// to swap in (a live replay row).
func (c *Console) renderFragment(w http.ResponseWriter, r *http.Request, page, name string, data any) {
	c.execute(w, r, http.StatusOK, page, name, data)
}

func (c *Console) renderView(w http.ResponseWriter, r *http.Request, status int, page, name string, v view) {
	if v.Signed && name == "layout" && v.Can.Decide {
		n, err := c.cfg.Ops.PendingForMe(r.Context(), c.caller(r))
		if err != nil {
			c.log.Warn("console: count the approvals waiting", "error", err, "request_id", c.cfg.RequestID(r.Context()))
		} else {
			v.Approvals = n
		}
	}
	// A page that is no longer refreshed, or whose subject is gone (a
	// message, task or request deleted while its page was open), ends the
	// auto-refresh; any other failure (unavailable, refused) is tried again.
	if name == "layout" && isRefresh(r) && v.RefreshURL == "" {
		switch {
		case status == http.StatusNotFound:
			v.Gone = true
			w.Header().Set(refreshDoneHeader, "1")
		case status < http.StatusBadRequest:
			w.Header().Set(refreshDoneHeader, "1")
		}
	}
	c.execute(w, r, status, page, name, v)
}

func (c *Console) execute(w http.ResponseWriter, r *http.Request, status int, page, name string, data any) {
	t := c.pages.byName[page]
	if name == "layout" && isRefresh(r) {
		name = "fragment"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, data); err != nil {
		c.log.Error("console: render page", "page", page, "error", err, "request_id", c.cfg.RequestID(r.Context()))
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	writeBody(w, r, status, buf.Bytes())
}

// renderError writes the error page with msg as its flash.
func (c *Console) renderError(w http.ResponseWriter, r *http.Request, s *session, status int, msg string) {
	v := c.newView(s, "error", http.StatusText(status), nil)
	v.Flash = &flash{Error: true, Text: msg}
	c.renderView(w, r, status, "error", "layout", v)
}

// renderFailure renders an error of the operations layer with its status.
func (c *Console) renderFailure(w http.ResponseWriter, r *http.Request, what string, err error) {
	s := sessionFrom(r.Context())
	status, msg := failure(err)
	if status == http.StatusInternalServerError {
		msg = c.internal(r, what, err)
	}
	c.renderError(w, r, s, status, msg)
}

// failure maps an error of the layer to a status and a message.
func failure(err error) (int, string) {
	var fe *formError
	if errors.As(err, &fe) {
		return http.StatusBadRequest, "Invalid: " + fe.Error()
	}
	switch ops.Classify(err) {
	case ops.CodeForbidden:
		return http.StatusForbidden, "Refused: " + ops.Message(err)
	case ops.CodeNotFound:
		return http.StatusNotFound, "Not found: " + ops.Message(err)
	case ops.CodeInvalid, ops.CodeConfirmRequired:
		return http.StatusBadRequest, "Invalid: " + ops.Message(err)
	case ops.CodeConflict:
		return http.StatusConflict, "Conflict: " + ops.Message(err)
	case ops.CodeUnavailable:
		return http.StatusServiceUnavailable, "Unavailable: " + ops.Message(err)
	}
	return http.StatusInternalServerError, ""
}

var funcs = template.FuncMap{
	"when":           func(t time.Time) template.HTML { return whenHTML(t, time.Now()) },
	"whenp":          fmtTimePtr,
	"at":             atHTML,
	"absp":           absTimePtr,
	"plural":         pluralAny,
	"ago":            ago,
	"num":            num,
	"bytes":          fmtBytes,
	"join":           strings.Join,
	"list":           func(s ...string) []string { return s },
	"add64":          func(a, b int64) int64 { return a + b },
	"len64":          func(m []store.Message) int64 { return int64(len(m)) },
	"max1":           func(n int64) int64 { return max(n, 1) },
	"lower":          strings.ToLower,
	"short":          short,
	"failureOf":      viewFailure,
	"approvalResult": readApprovalResult,
	"target":         targetWords,
	"span":           secondsWords,
	"defaultRate":    func() int { return defaultReplayRate },
	"canaryWait":     func() int64 { return defaultCanaryWait }, // the replay options' default
	"now":            func() time.Time { return time.Now() },
	// options: the rest of the replay options too, as the messages page
	// has them (a canary first, another target), on a group's own page; a
	// row of the groups listing keeps to how many and how fast.
	"groupForm": func(v view, id, back string, options bool) groupFormData {
		return groupFormData{ID: id, CSRF: v.CSRF, Can: v.Can, Back: back, Options: options}
	},
	"groupTitle":   groupTitle,
	"groupFailure": groupFailure,
	"failureType":  failureType,
	"editState":    editState,
	"copyState":    copyState,
	"jobHolder":    cron.JobView.Holder,
	"row": func(v view, t taskView) rowData {
		return rowData{T: t, CSRF: v.CSRF, CanCancel: v.Can.Cancel, Poll: v.RefreshURL == ""}
	},
}

// defaultReplayRate is the rate every replay form starts with (messages
// per second): a service just back on its feet is not flooded by default.
const defaultReplayRate = 50

// groupFormData is what a group's replay and acknowledge form needs.
type groupFormData struct {
	ID, CSRF string
	Can      can
	Back     string
	Options  bool // the rest of the replay options too (a group's page)
}

// rowData is one replay row: the task and what its cancel form needs.
type rowData struct {
	T         taskView
	CSRF      string
	CanCancel bool
	// Poll: the row of a running task polls itself (htmx), on a page the
	// auto-refresh does not refresh (the answer to a POST).
	Poll bool
}

// short cuts s to at most n runes, marking the cut.
func short(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

func fmtTimePtr(t *time.Time) template.HTML {
	if t == nil {
		return "–"
	}
	return whenHTML(*t, time.Now())
}

// absTimePtr is a time without how long ago it was, for a place that
// shows its age already (the overview's oldest pending message).
func absTimePtr(t *time.Time) template.HTML {
	if t == nil || t.IsZero() {
		return "–"
	}
	return timeElement(*t)
}

// timeElement is t, absolute in UTC, in a <time> element. Its date is a
// span of its own, which the stylesheet keeps on one line: a narrow column
// may put the clock under the date, but never cut the date at a hyphen.
func timeElement(t time.Time) template.HTML {
	date, clock, _ := strings.Cut(fmtTime(t), " ")
	return template.HTML(`<time datetime="` + t.UTC().Format(time.RFC3339) + `"><span class="date">` + date + `</span> ` + clock + `</time>`)
}

// fmtTime is a time as every time of the console is shown: in UTC, in
// the format the command line shows too (timefmt), "–" for none.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return timefmt.Human(t)
}

// whenHTML is a time as every page shows it: absolute in UTC, in a
// <time> element, with how long ago (or how soon) beside it.
func whenHTML(t, now time.Time) template.HTML {
	if t.IsZero() {
		return "–"
	}
	return timeElement(t) + template.HTML(` <span class="ago">(`+relative(t, now)+`)</span>`)
}

// atHTML is a time as whenHTML shows it, without how long ago or how
// soon: for a time that no longer matters relative to now (the start of a
// task cancelled before it).
func atHTML(t time.Time) template.HTML {
	if t.IsZero() {
		return "–"
	}
	return timeElement(t)
}

// relative says how long ago t was, or how soon it is, in its largest
// unit: "just now", "45 s ago", "5 min ago", "3 h ago", "2 days ago",
// "in 20 h".
func relative(t, now time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
		// A time to come reads rounded to its unit, not cut: cut, an
		// expiry 24 h away seen a few seconds later would read "in 23 h"
		// (the approvals page, right after the request). Each rounding
		// may reach the next unit's boundary (59 min 40 s: 1 h).
		d = d.Round(time.Second)
		if d >= time.Minute {
			d = d.Round(time.Minute)
		}
		if d >= time.Hour {
			d = d.Round(time.Hour)
		}
		if d >= 48*time.Hour {
			d = d.Round(24 * time.Hour)
		}
	}
	var s string
	switch {
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		s = strconv.Itoa(int(d/time.Second)) + " s"
	case d < time.Hour:
		s = strconv.Itoa(int(d/time.Minute)) + " min"
	case d < 48*time.Hour:
		s = strconv.Itoa(int(d/time.Hour)) + " h"
	default:
		s = plural(int64(d/(24*time.Hour)), "day", "days")
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// plural is n with the word's singular or plural form ("1 message",
// "2 messages"), n written with thousands separators.
func plural(n int64, one, many string) string {
	if n == 1 || n == -1 {
		return num(n) + " " + one
	}
	return num(n) + " " + many
}

// pluralAny is plural for a template, whose numbers are int, int64 or
// float64 (a replay's rate per second: 1 is "1 message per second", 0.5
// is "0.5 messages per second").
func pluralAny(n any, one, many string) string {
	switch v := n.(type) {
	case int:
		return plural(int64(v), one, many)
	case int64:
		return plural(v, one, many)
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1e15 {
			return plural(int64(v), one, many)
		}
		return strconv.FormatFloat(v, 'f', -1, 64) + " " + many
	}
	return fmt.Sprint(n) + " " + many
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return fmtDuration(time.Since(t)) + " ago"
}

// fmtDuration renders a duration to its two largest units ("3h 12m").
func fmtDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + "s"
	case s < 3600:
		return fmt.Sprintf("%dm %ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh %dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd %dh", s/86400, s%86400/3600)
}

// num renders an integer with thin separators between thousands.
func num(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fmtBytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	exp := min(int(math.Log(float64(n))/math.Log(1024)), 4)
	return fmt.Sprintf("%.1f %ciB", float64(n)/math.Pow(1024, float64(exp)), "KMGT"[exp-1])
}
