package console

import (
	"cmp"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/store"
)

// filterParams are the listing filters, named as in the API; "field" is
// the repeatable one.
var filterParams = []string{"status", "source_queue", "reason", "category", "group", "failed_after", "failed_before", "q", "field",
	"replay_task", "replay_outcome", "replay_error", "approval"}

// filterForm is a listing filter as the page's form holds it: the raw
// text of each field, shown back as typed.
type filterForm struct {
	Status, SourceQueue, Reason, Category, Group, FailedAfter, FailedBefore, Q string
	// FieldFilters are the JSON body conditions (API parameter "field",
	// repeatable), each as typed; empty inputs are dropped.
	FieldFilters []string
	// The messages of a replay task (those it could not publish, for a
	// reason: a task page's error links), or of an approval's snapshot.
	ReplayTask, ReplayOutcome, ReplayError, Approval string
}

func readFilterForm(v url.Values, prefix string) filterForm {
	g := func(k string) string { return strings.TrimSpace(v.Get(prefix + k)) }
	f := filterForm{Status: g("status"), SourceQueue: g("source_queue"), Reason: g("reason"), Category: g("category"), Group: g("group"),
		FailedAfter: g("failed_after"), FailedBefore: g("failed_before"), Q: g("q"),
		ReplayTask: g("replay_task"), ReplayOutcome: g("replay_outcome"), ReplayError: v.Get(prefix + "replay_error"), Approval: g("approval")}
	for _, s := range v[prefix+"field"] {
		// Only the ends are trimmed: a value's inner spaces are its own.
		if s = strings.TrimSpace(s); s != "" {
			f.FieldFilters = append(f.FieldFilters, s)
		}
	}
	return f
}

// values renders the form as query parameters (empty fields left out),
// each name with prefix.
func (f filterForm) values(prefix string) url.Values {
	v := url.Values{}
	for _, kv := range [][2]string{{"status", f.Status}, {"source_queue", f.SourceQueue}, {"reason", f.Reason}, {"category", f.Category},
		{"group", f.Group}, {"failed_after", f.FailedAfter}, {"failed_before", f.FailedBefore}, {"q", f.Q},
		{"replay_task", f.ReplayTask}, {"replay_outcome", f.ReplayOutcome}, {"replay_error", f.ReplayError}, {"approval", f.Approval}} {
		if kv[1] != "" {
			v.Set(prefix+kv[0], kv[1])
		}
	}
	for _, s := range f.FieldFilters {
		v.Add(prefix+"field", s)
	}
	return v
}

// Fields lists the form's non-empty fields, for hidden inputs: a
// repeated parameter once per value, so a bulk action on "all matching"
// carries every field filter and acts on exactly the filtered set.
func (f filterForm) Fields() [][2]string {
	var out [][2]string
	v := f.values("")
	for _, k := range filterParams {
		for _, s := range v[k] {
			out = append(out, [2]string{k, s})
		}
	}
	return out
}

// Empty reports whether no field is set.
func (f filterForm) Empty() bool { return len(f.values("")) == 0 }

// SearchesEveryStatus reports whether the form is a search (q or a body
// field) with no status chosen: the console then lists every status, so
// that a replayed message carrying an order id is found too (the API's
// listing keeps its documented default, pending).
func (f filterForm) SearchesEveryStatus() bool {
	return f.Status == "" && (f.Q != "" || len(f.FieldFilters) > 0)
}

// filter turns the form into a store filter; an error names the field.
// Times are RFC 3339, or a datetime-local input's value read as UTC.
func (f filterForm) filter() (store.Filter, error) {
	status := f.Status
	if f.SearchesEveryStatus() {
		status = "all"
	}
	sf := store.Filter{Status: status, SourceQueue: f.SourceQueue, Reason: f.Reason, Category: f.Category, Group: f.Group, Query: f.Q,
		Fields: f.FieldFilters}
	var err error
	if sf.FailedAfter, err = parseTime("failed_after", f.FailedAfter); err != nil {
		return store.Filter{}, err
	}
	if sf.FailedBefore, err = parseTime("failed_before", f.FailedBefore); err != nil {
		return store.Filter{}, err
	}
	sf.ReplayOutcome, sf.ReplayError = f.ReplayOutcome, f.ReplayError
	for _, id := range []struct {
		name string
		text string
		dst  *int64
	}{{"replay_task", f.ReplayTask, &sf.ReplayTask}, {"approval", f.Approval, &sf.Approval}} {
		if id.text == "" {
			continue
		}
		n, err := strconv.ParseInt(id.text, 10, 64)
		if err != nil || n <= 0 {
			return store.Filter{}, &formError{field: id.name, msg: "must be an id (a positive whole number)"}
		}
		*id.dst = n
	}
	return sf, nil
}

// formOf is a store filter as the form holds it: the messages page's
// address for the messages it selects.
func formOf(f store.Filter) filterForm {
	t := func(p *time.Time) string {
		if p == nil {
			return ""
		}
		return p.UTC().Format(time.RFC3339)
	}
	id := func(n int64) string {
		if n == 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	return filterForm{Status: f.Status, SourceQueue: f.SourceQueue, Reason: f.Reason, Category: f.Category, Group: f.Group,
		FailedAfter: t(f.FailedAfter), FailedBefore: t(f.FailedBefore), Q: f.Query, FieldFilters: f.Fields,
		ReplayTask: id(f.ReplayTask), ReplayOutcome: f.ReplayOutcome, ReplayError: f.ReplayError, Approval: id(f.Approval)}
}

func parseTime(name, s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			t = t.UTC()
			return &t, nil
		}
	}
	return nil, &formError{field: name, msg: "must be a time such as 2024-05-01T12:00 (UTC) or RFC 3339"}
}

// formError is a form field the console itself could not read.
type formError struct {
	field, msg string
	// sentence, when set, is the whole error in the form's words.
	sentence string
}

func (e *formError) Error() string { return e.field + ": " + e.msg }

// actionLabels name the action forms' fields as their labels do.
var actionLabels = map[string]string{
	"id": "The selected messages", "limit": "At most", "rate": "Rate (messages per second)",
	"delay": "Delay before start (seconds)", "canary_count": "Canary: messages first",
	"canary_wait": "Canary: seconds to watch them",
}

// words is the error as an action form's page says it: the field named by
// its label ("Delay before start (seconds) must be …").
func (e *formError) words() string {
	if e.sentence != "" {
		return e.sentence
	}
	label := cmp.Or(actionLabels[e.field], e.field)
	if strings.HasPrefix(e.msg, "must ") {
		return label + " " + e.msg + "."
	}
	return label + ": " + e.msg + "."
}

// formInt reads a whole number field; empty is def.
func formInt(v url.Values, name string, def, lo, hi int64) (int64, error) {
	s := strings.TrimSpace(v.Get(name))
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, &formError{field: name, msg: "must be a whole number from " + strconv.FormatInt(lo, 10) + " to " + strconv.FormatInt(hi, 10)}
	}
	return n, nil
}

// formIDs reads the repeated id field.
func formIDs(v url.Values) ([]int64, error) {
	var ids []int64
	for _, s := range v["id"] {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n <= 0 {
			return nil, &formError{field: "id", msg: "must be message ids"}
		}
		ids = append(ids, n)
	}
	return ids, nil
}
