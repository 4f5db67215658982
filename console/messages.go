package console

import (
	"cmp"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// pageSizes are the messages page's sizes; the first is the default.
var pageSizes = []int{50, 100, 500}

// trailMax bounds how many earlier pages Previous can go back to: their
// cursors travel in the address (a keyset has no way back on its own).
const trailMax = 20

// listView is how the messages page lists what the filter selects: the
// page size and the order. Kept in every link of the page, never part of
// an action's selection.
type listView struct {
	Size int
	// Sort is "" (newest first), "failed" (latest death first) or
	// "queue" (by source queue).
	Sort string
}

func (v listView) set(q url.Values) {
	switch {
	case v.Size == pageSizes[0]:
	case v.Limit() != 0:
		q.Set("limit", strconv.Itoa(v.Size))
	default:
		q.Set("size", strconv.Itoa(v.Size))
	}
	if v.Sort != "" {
		q.Set("sort", v.Sort)
	}
}

// Limit is the page size when the API's limit chose one the selector
// does not offer, else 0. The form carries it in a hidden limit, and the
// selector shows it as an option with no size, so that changing the
// order keeps it while choosing a size replaces it.
func (v listView) Limit() int {
	if slices.Contains(pageSizes, v.Size) {
		return 0
	}
	return v.Size
}

// messagesData is the messages page.
type messagesData struct {
	Form     filterForm
	View     listView
	Sizes    []int
	Messages []store.Message
	// Snippets says where a search matched each message, by id.
	Snippets map[int64]*snippet
	// Count is what the filter matches: exact (Exact) when the summary
	// or group counters answer it or the listing ended, else a lower
	// bound ("more than Count").
	Count int64
	Exact bool
	// Seen is how many messages the pages before this one showed.
	Seen                       int64
	NextURL, PrevURL, FirstURL string
	// Ranges are the quick time ranges ("last hour"), each the filter
	// with failed_after set.
	Ranges [][2]string
	// Back is this page's address, for the actions to return to.
	Back   string
	Queues []string
	// Group is the failure group the filter names, for the heading.
	Group *store.Group
	// AllStatuses: a search with no status chosen lists every status;
	// Resolved counts the replayed and acknowledged messages among the
	// rows, which the page says.
	AllStatuses bool
	Resolved    int
	// Failed: the filter was refused (the flash says why); nothing is
	// listed or counted.
	Failed bool
	// TextIncomplete: q's words were looked for while more messages were
	// waiting for the text index than a search reads one by one, so older
	// matches among them are missing (ops.MessagePage.TextIncomplete).
	TextIncomplete bool
	// SearchHelp says what a search reads (searchHelp).
	SearchHelp string
}

// handleMessages lists messages a keyset page at a time: newest first, by
// failed time or by queue, 50, 100 or 500 a page (or the API's limit).
func (c *Console) handleMessages(w http.ResponseWriter, r *http.Request) {
	ctx, caller := r.Context(), c.caller(r)
	q := r.URL.Query()
	form := readFilterForm(q, "")
	view, err := readListView(q, form)
	if err != nil {
		c.renderFilterFailure(w, r, form, view, "read the page", err)
		return
	}
	f, err := form.filter()
	if err != nil {
		c.renderFilterFailure(w, r, form, view, "read the filter", err)
		return
	}
	seen, err := formInt(q, "seen", 0, 0, 1<<53)
	if err != nil {
		c.renderFilterFailure(w, r, form, view, "read the page", err)
		return
	}
	cursor := q.Get("cursor")
	req := ops.ListRequest{Filter: f, Limit: view.Size, Cursor: cursor, Sort: view.Sort}
	if form.Q != "" {
		req.BodyPrefix = snippetBodyPrefix
	}
	page, err := c.cfg.Ops.ListMessages(ctx, caller, req)
	if err != nil {
		c.renderFilterFailure(w, r, form, view, "list messages", err)
		return
	}
	d := messagesData{Form: form, View: view, Sizes: pageSizes, Seen: seen, Back: r.URL.RequestURI(), AllStatuses: form.SearchesEveryStatus(),
		SearchHelp: c.searchHelpFor(r, f.SourceQueue)}
	d.setRows(page.Messages)
	d.setLinks(readTrail(q.Get("trail")), cursor, page)
	if len(page.Messages) == 0 && cursor != "" {
		// A page past the first with nothing left on it (its rows were
		// acted on, say): the page before, back to the first, shows what
		// still matches, with the flash the action left.
		c.redirectWithFlash(w, r, cmp.Or(d.PrevURL, d.FirstURL), sessionFrom(ctx).flash)
		return
	}
	st, err := c.cfg.Ops.Status(ctx, caller)
	if err != nil {
		c.renderFailure(w, r, "read the queue summary", err)
		return
	}
	d.Queues = queueNames(st)
	if f.Group != "" {
		if g, err := c.cfg.Ops.Group(ctx, caller, f.Group); err == nil {
			d.Group = &g
		}
	}
	d.Count, d.Exact = c.count(r, f, st, page, seen)
	// A count of a listing that may miss matches is a lower bound.
	d.TextIncomplete = page.TextIncomplete
	d.Exact = d.Exact && !page.TextIncomplete
	title := "Messages"
	if d.Group != nil {
		title = "Messages of " + groupTitle(*d.Group)
	}
	c.render(w, r, http.StatusOK, "messages", sessionFrom(ctx), title, d)
}

// setRows sets the page's rows, with where a search matched each.
func (d *messagesData) setRows(ms []store.Message) {
	d.Messages = ms
	for i := range d.Messages {
		m := &d.Messages[i]
		if d.Form.Q != "" {
			if d.Snippets == nil {
				d.Snippets = map[int64]*snippet{}
			}
			d.Snippets[m.ID] = findSnippet(*m, d.Form.Q)
			m.Body = nil // read for the snippet only
		}
		if m.Status == store.StatusReplayed || m.Status == store.StatusAcknowledged {
			d.Resolved++
		}
	}
}

// link is the address of the listing with the page's filter and view,
// changed by extra.
func (d *messagesData) link(extra func(url.Values)) string {
	v := d.Form.values("")
	d.View.set(v)
	if extra != nil {
		extra(v)
	}
	return "/ui/messages?" + v.Encode()
}

// setLinks sets the links to the first, previous and next pages, and the
// quick time ranges. trail holds the cursors of the pages before this one.
func (d *messagesData) setLinks(trail []string, cursor string, page ops.MessagePage) {
	seen, size := d.Seen, int64(d.View.Size)
	d.FirstURL = d.link(nil)
	if page.HasMore && page.NextCursor != nil {
		d.NextURL = d.link(func(v url.Values) {
			v.Set("cursor", *page.NextCursor)
			v.Set("seen", strconv.FormatInt(seen+int64(len(page.Messages)), 10))
			v.Set("trail", writeTrail(append(slices.Clip(trail), cmp.Or(cursor, "-"))))
		})
	}
	if n := len(trail); n > 0 && seen > 0 {
		d.PrevURL = d.link(func(v url.Values) {
			if prev := trail[n-1]; prev != "-" {
				v.Set("cursor", prev)
				v.Set("trail", writeTrail(trail[:n-1]))
			}
			// Every page before another is full: the one before this
			// showed view.Size messages.
			if s := seen - size; s > 0 {
				v.Set("seen", strconv.FormatInt(s, 10))
			}
		})
	}
	now := time.Now().UTC()
	for _, rg := range []struct {
		label string
		d     time.Duration
	}{{"last hour", time.Hour}, {"last 24 h", 24 * time.Hour}, {"last 7 days", 7 * 24 * time.Hour}} {
		d.Ranges = append(d.Ranges, [2]string{rg.label, d.link(func(v url.Values) {
			v.Set("failed_after", now.Add(-rg.d).Format("2006-01-02T15:04"))
			v.Del("failed_before")
		})})
	}
}

// readListView reads the page size and the order; a search lists newest
// first only. The size is the selector's size (50, 100 or 500) or, without
// one, the API listing's limit, bounded as the API bounds it: the page
// takes the API's query parameters. On an error, the view holds what
// could be read (the defaults for the rest), for the form shown with the
// error.
func readListView(q url.Values, form filterForm) (listView, error) {
	v := listView{Size: pageSizes[0], Sort: strings.TrimSpace(q.Get("sort"))}
	var err error
	switch v.Sort {
	case store.SortNewest, store.SortFailed, store.SortQueue:
	default:
		v.Sort, err = store.SortNewest, &formError{field: "sort", msg: "must be newest first, failed time or queue"}
	}
	if s := strings.TrimSpace(q.Get("size")); s != "" {
		n, e := strconv.Atoi(s)
		if e != nil || !slices.Contains(pageSizes, n) {
			return v, &formError{field: "size", msg: "must be 50, 100 or 500"}
		}
		v.Size = n
	} else if s := strings.TrimSpace(q.Get("limit")); s != "" {
		n, e := strconv.Atoi(s)
		if e != nil || n < 1 || n > store.ListLimitMax {
			return v, &formError{field: "limit", msg: "must be a whole number from 1 to " + strconv.Itoa(store.ListLimitMax)}
		}
		v.Size = n
	}
	if form.Q != "" {
		v.Sort = store.SortNewest
	}
	return v, err
}

// readTrail reads the cursors of the pages before this one, oldest first
// ("-" for the first page).
func readTrail(s string) []string {
	if s == "" {
		return nil
	}
	t := strings.Split(s, ".")
	if len(t) > trailMax {
		t = t[len(t)-trailMax:]
	}
	return t
}

// writeTrail writes a trail, dropping the oldest cursors past trailMax
// (Previous then ends there; First page still goes to the start).
func writeTrail(t []string) string {
	if len(t) > trailMax {
		t = t[len(t)-trailMax:]
	}
	return strings.Join(t, ".")
}

// labels name the filter's fields as the form does, for the errors of a
// refused filter: the API's parameter names mean nothing on the page.
var labels = map[string]string{
	"status": "Status", "source_queue": "Source queue", "reason": "Reason", "category": "Category",
	"group": "Failure group", "failed_after": "Failed after", "failed_before": "Failed before",
	"q": "Search", "field": "JSON body field", "fields": "JSON body fields", "size": "Page size", "limit": "Page size", "sort": "Sort",
	"cursor": "Page", "seen": "Page",
}

// paramName finds a parameter name where an error names a field: at the
// start of the text or after a space or "(", and before ":", ",", " (",
// a quote, " is", " must", " lists", " or" or the end.
var paramName = regexp.MustCompile(`(^|[\s(])(source_queue|failed_after|failed_before|status|category|group|reason|fields|field|q|size|limit|sort|cursor|seen)(:|,| \(| "| is\b| must\b| lists\b| or\b|$)`)

// labelize rewrites an error about the filter in the form's words.
func labelize(msg string) string {
	msg = strings.Replace(msg, "invalid filter: ", "", 1)
	return paramName.ReplaceAllStringFunc(msg, func(m string) string {
		sub := paramName.FindStringSubmatch(m)
		return sub[1] + labels[sub[2]] + sub[3]
	})
}

// renderFilterFailure answers a refused filter with the messages page
// itself: the filter bar as typed, the sort and page size as chosen, and
// what was wrong in the flash.
func (c *Console) renderFilterFailure(w http.ResponseWriter, r *http.Request, form filterForm, view listView, what string, err error) {
	status, msg := failure(err)
	if status != http.StatusBadRequest && status != http.StatusForbidden {
		c.renderFailure(w, r, what, err)
		return
	}
	s := sessionFrom(r.Context())
	v := c.newView(s, "messages", "Messages", messagesData{Form: form, View: view, Sizes: pageSizes, Failed: true, Back: r.URL.RequestURI(),
		SearchHelp: c.searchHelpFor(r, form.SourceQueue)})
	v.Flash = &flash{Error: true, Text: labelize(msg)}
	c.renderView(w, r, status, "messages", "layout", v)
}

// count is what the filter matches, without counting dead_messages: from
// the summary (status and queue only), from the group's counters (a group
// and status only), or exact when the listing ended on this page; else a
// lower bound, the messages seen so far.
func (c *Console) count(r *http.Request, f store.Filter, st ops.StatusView, page ops.MessagePage, seen int64) (int64, bool) {
	statuses, err := f.Statuses()
	listed := seen + int64(len(page.Messages))
	if err != nil {
		return listed, false
	}
	if !page.HasMore {
		return listed, true
	}
	sum := func(cn store.Counts) int64 {
		var n int64
		for _, s := range store.Statuses {
			if statuses == nil || slices.Contains(statuses, s) {
				n += countOf(cn, s)
			}
		}
		return n
	}
	plain := f.CountersAnswer()
	switch {
	case plain && f.Group == "":
		var n int64
		for _, q := range st.Queues {
			if f.SourceQueue == "" || f.SourceQueue == q.SourceQueue {
				n += sum(q.Counts)
			}
		}
		return n, true
	case plain && f.Group != "":
		g, err := c.cfg.Ops.Group(r.Context(), c.caller(r), f.Group)
		if err == nil && (f.SourceQueue == "" || f.SourceQueue == g.SourceQueue) {
			return sum(g.Counts), true
		}
	}
	return listed, false
}

func countOf(c store.Counts, status string) int64 {
	switch status {
	case store.StatusPending:
		return c.Pending
	case store.StatusReplaying:
		return c.Replaying
	case store.StatusReplayed:
		return c.Replayed
	case store.StatusAcknowledged:
		return c.Acknowledged
	}
	return 0
}
