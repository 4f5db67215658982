package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// query reads URL query parameters, refusing unknown and repeated ones so
// that a typo is an error instead of a silently ignored filter.
type query struct {
	v url.Values
}

// repeatable are the parameters that may be given more than once, each
// time adding a condition.
var repeatable = []string{"field"}

func newQuery(r *http.Request, allowed ...string) (query, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return query{}, badParam("query", "cannot parse the query string: %v", err)
	}
	for k, vals := range v {
		for _, s := range vals {
			if err := ops.CheckText(k, s); err != nil {
				return query{}, err
			}
		}
		if !slices.Contains(allowed, k) {
			return query{}, badParam(k, "unknown parameter (allowed: %s)", strings.Join(allowed, ", "))
		}
		if len(vals) > 1 && !slices.Contains(repeatable, k) {
			return query{}, badParam(k, "given %d times; give it once", len(vals))
		}
	}
	return query{v: v}, nil
}

func (q query) str(name string) string { return q.v.Get(name) }

func (q query) int(name string, def, lo, hi int) (int, error) {
	s := q.v.Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badParam(name, "%q must be a whole number from %d to %d", s, lo, hi)
	}
	return n, nil
}

// id reads a positive id parameter; empty is 0.
func (q query) id(name string) (int64, error) {
	s := q.v.Get(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, badParam(name, "%q must be an id (a positive whole number)", s)
	}
	return n, nil
}

func (q query) bool(name string) (bool, error) {
	s := q.v.Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, badParam(name, "%q must be true or false", s)
	}
	return b, nil
}

func (q query) time(name string) (*time.Time, error) {
	s := q.v.Get(name)
	if s == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, badParam(name, "%q must be an RFC 3339 time such as 2024-05-01T12:00:00Z", s)
	}
	return &t, nil
}

// filter reads the filter parameters.
func (q query) filter() (store.Filter, error) {
	f := store.Filter{
		Status:      q.str("status"),
		SourceQueue: q.str("source_queue"),
		Reason:      q.str("reason"),
		Query:       q.str("q"),
		Group:       q.str("group"),
		Fields:      q.v["field"],
		Category:    q.str("category"),
	}
	var err error
	if f.FailedAfter, err = q.time("failed_after"); err != nil {
		return f, err
	}
	if f.FailedBefore, err = q.time("failed_before"); err != nil {
		return f, err
	}
	// The messages of one replay task (those it failed to publish, for a
	// reason), or of one approval request's snapshot.
	if f.ReplayTask, err = q.id("replay_task"); err != nil {
		return f, err
	}
	f.ReplayOutcome, f.ReplayError = q.str("replay_outcome"), q.str("replay_error")
	if f.Approval, err = q.id("approval"); err != nil {
		return f, err
	}
	return f, nil
}

const msgUnknownField = "unknown field"

// decodeBody reads a JSON request body into v, refusing unknown fields and
// trailing data.
func decodeBody(r *http.Request, v any) error {
	if r.Body == nil {
		return badParam("body", "a JSON body is required")
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var (
			mbe *http.MaxBytesError
			se  *json.SyntaxError
			te  *json.UnmarshalTypeError
			tpe *time.ParseError
		)
		switch {
		case errors.As(err, &mbe):
			return err
		case errors.Is(err, io.EOF):
			return badParam("body", "a JSON body is required")
		case errors.As(err, &se):
			return badParam("body", "invalid JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			return badParam(cmp.Or(ops.JSONField(te.Field), "body"), "must be %s, not JSON %s", te.Type, te.Value)
		case errors.As(err, &tpe):
			// encoding/json does not say which field held the time.
			return badParam("body", "%q is not an RFC 3339 time such as 2024-05-01T12:00:00Z", tpe.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return badParam(name, msgUnknownField)
		default:
			return badParam("body", "%v", err)
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badParam("body", "unexpected data after the JSON object")
	}
	return nil
}

// refuseBody checks that a request to a route taking no body has none:
// empty, or an empty JSON object. A field there is as unknown as a
// misspelt one anywhere else, and is refused the same way, by name.
func refuseBody(r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	r.Body = io.NopCloser(strings.NewReader(string(b)))
	var none struct{}
	err = decodeBody(r, &none)
	var pe *paramError
	if err == nil || (errors.As(err, &pe) && pe.msg == msgUnknownField) {
		return err
	}
	return badParam("body", "%s %s takes no body", r.Method, r.URL.Path)
}

// pathID reads a positive integer path parameter.
func pathID(r *http.Request, name string) (int64, error) {
	s := r.PathValue(name)
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, badParam(name, "%q must be a positive integer", s)
	}
	return id, nil
}
