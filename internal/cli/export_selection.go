package cli

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dlq/dlq/store"
)

// A cut export's file says which messages it holds, not which filter
// chose them, and the cursor a resume sends is a message id, not bound to
// the filter: resumed under another filter, the file would end "complete"
// with two selections in it. So a cut export records its selection beside
// its file (FILE.selection; the export's lines have no header to hold it,
// and import reads them as they are), and --resume compares it.
//
// The record sits beside the export under a name any glob of the
// directory matches, so `dlq import exports/*` passes it to import, which
// recognises it by its content and skips it, saying so (selectionRecord),
// as it skips the record's lines among the exports' on stdin (`cat
// exports/* | dlq import`). That, not a name a glob misses (a dotfile), is what the operator
// expects: the record stays in sight beside the cut export it belongs to,
// which the messages of export and resume name, and is not left behind,
// unseen, by `rm exports/*` to hold a later export of the same name to a
// selection it never had; and import skips it however it was named to it
// (a glob, find, a list).

// selectionSuffix names the file beside a cut export that records what it
// selects.
const selectionSuffix = ".selection"

// selectionMarker begins the second line of a selection record: what
// tells import the file is one.
const selectionMarker = "# dlq export: the selection of the cut export "

// exportSelection is what an export selects: q, the filter as sent to the
// API, with time flags given as a duration ago (given) measured once
// (measured; see relativeTimes); flags says a filter flag was given.
type exportSelection struct {
	q               url.Values
	given, measured []string
	flags           bool
}

// normalSelection is q as a selection is recorded and compared: the query
// string without the cursor, its keys in order, and each value that
// selects what another does written one way, so that equal selections
// compare equal (normalValues) and different ones still differ.
func normalSelection(q url.Values) string {
	n := url.Values{}
	for k, vs := range q {
		if k == "cursor" {
			continue
		}
		if vs = normalValues(k, vs); len(vs) > 0 {
			n[k] = vs
		}
	}
	return n.Encode()
}

// normalValues writes the values of the filter parameter k one way, as
// the API reads them (api's query.filter, store.Filter):
//   - a parameter but field is read by its first value, and an empty one
//     is an absent one;
//   - status: absent is the API's default, pending, so pending is written
//     as no status; a comma list is read with spaces trimmed, in any
//     order, a status named twice once, and naming every status is "all"
//     (the database's check constraint allows no other);
//   - category: a comma list likewise; naming every category is not
//     written as no category, though, since no constraint keeps a stored
//     one to the three;
//   - field: every condition must hold, in any order and however often
//     named, each written as the API parses it (store.ParseField).
//
// A value the API would refuse is left as given, so that it is refused,
// not taken for another. Every other filter's absence selects what no
// value does (any reason, every message of the task), so it has no
// default to write.
func normalValues(k string, vs []string) []string {
	if k == "field" {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = v
			if f, err := store.ParseField(v); err == nil {
				out[i] = f.String()
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	v := vs[0]
	switch k {
	case "status":
		v = normalList(v, store.Statuses, true)
		if v == store.StatusPending {
			return nil
		}
	case "category":
		v = normalList(v, store.Categories, false)
	}
	if v == "" {
		return nil
	}
	return []string{v}
}

// normalList writes a comma list of known values sorted, each once,
// without spaces; with all, "all" and a list of every known value as
// "all". "" stays "", and a list naming anything else stays as it is.
func normalList(list string, known []string, all bool) string {
	t := strings.TrimSpace(list)
	if t == "" || all && t == "all" {
		return t
	}
	var out []string
	for _, p := range strings.Split(t, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(known, p) {
			return list
		}
		out = append(out, p)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if all && len(out) == len(known) {
		return "all"
	}
	return strings.Join(out, ",")
}

// selectionFlagOrder is the order selectionFlags names the filter
// parameters in: the queue first, as the flags are usually written.
var selectionFlagOrder = []string{"source_queue", "status", "reason", "category", "group", "q",
	"failed_after", "failed_before", "field", "replay_task", "replay_outcome"}

// selectionFlags says a recorded selection (a query string) as the filter
// flags that select it, which is what the operator types.
func selectionFlags(sel string) string {
	q, err := url.ParseQuery(sel)
	if err != nil {
		return sel
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range q {
			if !yield(k) {
				return
			}
		}
	})
	slices.SortStableFunc(keys, func(a, b string) int {
		return orderOf(a) - orderOf(b)
	})
	var words []string
	for _, k := range keys {
		name, ok := filterFlagNames[k]
		if !ok || !strings.HasPrefix(name, "--") {
			name = "--" + strings.ReplaceAll(k, "_", "-")
		}
		for _, v := range q[k] {
			words = append(words, name+" "+shellWord(v))
		}
	}
	if len(words) == 0 {
		return "no filter flags"
	}
	return strings.Join(words, " ")
}

// orderOf is k's place in selectionFlagOrder; unknown keys go last.
func orderOf(k string) int {
	if i := slices.Index(selectionFlagOrder, k); i >= 0 {
		return i
	}
	return len(selectionFlagOrder)
}

// shellWord quotes v for a shell when it holds more than plain characters,
// so that a flag from an error can be pasted into a command line.
func shellWord(v string) string {
	plain := v != "" && strings.IndexFunc(v, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:+=,/@%-", r))
	}) < 0
	if plain {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

// selectionPath is the file that records the selection of the export in
// path, beside the file a symbolic link names (where the export is).
func selectionPath(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	return path + selectionSuffix
}

// readSelection reads the selection recorded beside the export in path;
// ok is false when there is none (an export cut by an older dlq, or one
// not cut).
func readSelection(path string) (sel string, ok bool, err error) {
	file := selectionPath(path)
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the selection of the cut export %s: %w", path, err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if _, err := url.ParseQuery(line); err != nil {
		return "", false, &usageError{fmt.Errorf("%s is not the selection dlq export recorded for %s (%v): "+
			"remove it to resume with the filter flags given, or start a new export", file, path, err)}
	}
	return line, true, nil
}

// writeSelection records sel beside the export in path: its first line is
// what --resume reads, the second says it in flags for whoever looks. It is
// written beside and renamed, so that it is never found half written.
func writeSelection(path, sel string) error {
	file := selectionPath(path)
	text := fmt.Sprintf("%s\n%s%s (%s); --resume compares it with its filter flags, or uses it without them\n",
		sel, selectionMarker, filepath.Base(path), selectionFlags(sel))
	tmp := fmt.Sprintf("%s.%d.tmp", file, os.Getpid())
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return fmt.Errorf("record the selection of the cut export beside %s: %w", path, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("record the selection of the cut export beside %s: %w", path, err)
	}
	return nil
}

// selectionRecord reports that first and second, two lines in a row, are
// a selection record (writeSelection), not an export's: first a query
// string (empty for an export of everything), second the marker; and
// returns the name of the export it records (its base name, as written).
// The content decides, not a file's name: an export may be named anything,
// and no export line is a query string or begins with "#". It is import's
// one rule for the record, wherever its input holds one: a file of its
// own, or lines of a stream (`cat exports/* | dlq import`).
func selectionRecord(first, second []byte) (export string, ok bool) {
	if bytes.HasPrefix(first, []byte("{")) {
		return "", false
	}
	rest, ok := bytes.CutPrefix(second, []byte(selectionMarker))
	if !ok {
		return "", false
	}
	if _, err := url.ParseQuery(string(first)); err != nil {
		return "", false
	}
	name, _, _ := bytes.Cut(rest, []byte(" ("))
	return string(name), true
}

// removeSelection removes the selection recorded beside path: the export
// there is complete, and a record left over would hold a later cut export
// of the same file to a selection it never had.
func removeSelection(path string) error {
	err := os.Remove(selectionPath(path))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the selection recorded for the cut export %s: %w", path, err)
	}
	return nil
}

// checkResumeSelection decides the selection that resumes the cut export
// in path, which holds messages: the recorded one when no filter flag was
// given (sel.q becomes it), or sel's when it is the recorded one. A
// different one is refused: the file would end "complete" holding two
// selections. note is what to tell the operator ("" for nothing).
func checkResumeSelection(path string, sel *exportSelection) (note string, err error) {
	rec, ok, err := readSelection(path)
	if err != nil {
		return "", err
	}
	// readSelection parsed it. It is compared in today's normal form: a
	// record an earlier dlq wrote ("status=pending") selects what it says.
	recQ, _ := url.ParseQuery(rec)
	rec = normalSelection(recQ)
	if ok && !sel.flags {
		sel.q = recQ
		return fmt.Sprintf("resuming %s with the selection it was cut with (recorded in %s): %s",
			path, selectionPath(path), selectionFlags(rec)), nil
	}
	if len(sel.given) > 0 {
		return "", &resumeTimesError{path: path, given: sel.given, recorded: ok}
	}
	if !ok {
		return fmt.Sprintf("%s records no selection (cut by an older dlq): resuming with %s, which must be the filter flags it began with",
			path, selectionFlags(normalSelection(sel.q))), nil
	}
	if now := normalSelection(sel.q); now != rec {
		return "", &usageError{fmt.Errorf("--resume: %s was cut exporting %s (recorded in %s), not %s: "+
			"resumed under another filter, the file would end complete with messages of both; "+
			"resume with the flags it began with (or --resume --output %s with no filter flags, which uses the recorded ones), "+
			"or start a new export into another file, or without --resume",
			path, selectionFlags(rec), selectionPath(path), selectionFlags(now), path)}
	}
	return "", nil
}

// relativeTimes lists the time flags given as a duration ago, as given
// ("--after 24h") and as measured (q's time: "--after 2026-05-01T10:00:00Z").
func relativeTimes(ff *filterFlags, q url.Values) (given, measured []string) {
	for _, tf := range []struct {
		flag  timeFlag
		param string
	}{{ff.after, "failed_after"}, {ff.before, "failed_before"}} {
		if _, err := time.ParseDuration(tf.flag.text); err != nil {
			continue
		}
		given = append(given, "--"+tf.flag.name+" "+tf.flag.text)
		measured = append(measured, "--"+tf.flag.name+" "+q.Get(tf.param))
	}
	return given, measured
}

// resumeTimesError refuses to resume an export with a time given as a
// duration ago. recorded: the export's selection is recorded beside it.
type resumeTimesError struct {
	path     string
	given    []string
	recorded bool
}

func (e *resumeTimesError) Error() string {
	example := make([]string, len(e.given))
	for i, g := range e.given {
		name, _, _ := strings.Cut(g, " ")
		example[i] = name + " 2026-05-01T10:00:00Z"
	}
	alt := ""
	if e.recorded {
		alt = ", or --resume with no filter flags, which uses the selection recorded beside it"
	}
	return fmt.Sprintf("--resume: %s would be measured from now, not from when the export in %s began, "+
		"and the messages that failed in between would be skipped; give the time the export measured "+
		"as an RFC 3339 time (dlq export printed it: %s, say)%s, or export again without --resume",
		strings.Join(e.given, " "), e.path, strings.Join(example, " "), alt)
}
