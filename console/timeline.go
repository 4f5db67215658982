package console

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// The death timeline of a message: every death, hop by hop, where it
// happened (the application's queue, from x-death, never dlq's own queue),
// each replay of the message and each edit, oldest first.

// timelineEvent is one step of the timeline.
type timelineEvent struct {
	// At is what the row shows: for a hop, when the message first died
	// there (x-death's time, whole seconds of the broker's clock).
	At time.Time
	// order places the row: a death's hops sit together at the time the
	// death reached dlq (failed_at, as precise as a replay's creation, so
	// a replay and the death that followed it keep their order), oldest
	// hop first.
	order time.Time
	hop   int
	// Kind is "death", "replay" or "edit".
	Kind string
	// A death (one hop of x-death): the queue the message died in, why,
	// how often there (x-death counts the deaths of one queue and reason
	// in one entry), through which exchange and routing keys.
	Queue, Reason, Exchange, RoutingKeys string
	Count                                int64
	// FailureType and FailureMessage are what the application said, for
	// the last hop of a death (the one that brought it to dlq).
	FailureType, FailureMessage string
	// Latest marks the hops of the message's current death.
	Latest bool
	// A replay or an edit: its task, and what became of the message in it.
	Replay *ops.MessageReplay
	Edit   *store.MessageEdit
}

// xDeath is one entry of a message's x_death (its JSON form in the API).
type xDeath struct {
	Queue       string    `json:"queue"`
	Reason      string    `json:"reason"`
	Exchange    string    `json:"exchange"`
	RoutingKeys []string  `json:"routing_keys"`
	Count       int64     `json:"count"`
	Time        time.Time `json:"time"`
}

// historyEntry is one earlier death of death_history.
type historyEntry struct {
	FailedAt       time.Time       `json:"failed_at"`
	Reason         string          `json:"reason"`
	DeathCount     int64           `json:"death_count"`
	FailureType    *string         `json:"failure_type"`
	FailureMessage *string         `json:"failure_message"`
	XDeath         json.RawMessage `json:"x_death"`
}

// death is one death of the message: when it reached dlq, and its hops.
type death struct {
	At                          time.Time
	Reason                      string
	Count                       int64
	FailureType, FailureMessage string
	XDeath                      []xDeath
}

// hops turns a death into its timeline rows, oldest hop first. x-death
// lists the most recent (queue, reason) first, each with the time it
// first happened and how often; without x-death (a message published to
// the dead-letter exchange by the application itself) the death is one
// row in the message's source queue.
func (d death) hops(sourceQueue string, latest bool) []timelineEvent {
	if len(d.XDeath) == 0 {
		return []timelineEvent{{At: d.At, order: d.At, Kind: "death", Queue: sourceQueue, Reason: d.Reason, Count: max(d.Count, 1),
			FailureType: d.FailureType, FailureMessage: d.FailureMessage, Latest: latest}}
	}
	out := make([]timelineEvent, 0, len(d.XDeath))
	for i := len(d.XDeath) - 1; i >= 0; i-- {
		x := d.XDeath[i]
		e := timelineEvent{At: x.Time, order: d.At, hop: len(out), Kind: "death", Queue: x.Queue, Reason: x.Reason, Exchange: x.Exchange,
			RoutingKeys: strings.Join(x.RoutingKeys, ", "), Count: max(x.Count, 1), Latest: latest}
		if e.At.IsZero() {
			e.At = d.At
		}
		if i == 0 {
			// The most recent hop is the death that brought it to dlq.
			e.FailureType, e.FailureMessage = d.FailureType, d.FailureMessage
		}
		out = append(out, e)
	}
	return out
}

// viewTimeline builds a message's timeline: its earlier deaths
// (death_history, each with its hops when they were recorded), its
// current death's hops (x_death), its replays and its edit, oldest
// first.
func viewTimeline(m store.Message, replays []ops.MessageReplay) []timelineEvent {
	var out []timelineEvent
	var hist []historyEntry
	_ = json.Unmarshal(m.DeathHistory, &hist)
	for _, h := range hist {
		d := death{At: h.FailedAt, Reason: h.Reason, Count: h.DeathCount, FailureType: deref(h.FailureType), FailureMessage: deref(h.FailureMessage)}
		_ = json.Unmarshal(h.XDeath, &d.XDeath)
		out = append(out, d.hops(m.SourceQueue, false)...)
	}
	cur := death{At: m.FailedAt, Reason: m.Reason, Count: m.DeathCount, XDeath: viewDeaths(m)}
	if f := viewFailure(m.Failure); f != nil {
		cur.FailureType, cur.FailureMessage = f.Type, f.Message
	}
	out = append(out, cur.hops(m.SourceQueue, true)...)
	for i := range replays {
		r := &replays[i]
		if m.Edited != nil && r.Task.ID == m.Edited.TaskID {
			continue // shown as the edit
		}
		out = append(out, timelineEvent{At: r.Task.CreatedAt, order: r.Task.CreatedAt, Kind: "replay", Replay: r})
	}
	if m.Edited != nil {
		out = append(out, timelineEvent{At: m.Edited.EditedAt, order: m.Edited.EditedAt, Kind: "edit", Edit: m.Edited})
	}
	slices.SortStableFunc(out, func(a, b timelineEvent) int {
		if c := a.order.Compare(b.order); c != 0 {
			return c
		}
		return a.hop - b.hop
	})
	return out
}

// deathsRecorded counts a message's deaths in its queue as its timeline
// shows them: each earlier death's (death_history) and the current one's,
// each the broker's count at least 1. The broker's own count (x-death,
// death_count) starts again after a replay, which strips the death
// headers: alone it says how often the message died since its last
// replay. died is how many deaths dlq recorded (earlier ones included);
// atLeast is set when death_history is full (store.DeathHistoryMax), its
// oldest deaths dropped.
func deathsRecorded(m store.Message) (n int64, died int, atLeast bool) {
	var hist []historyEntry
	_ = json.Unmarshal(m.DeathHistory, &hist)
	for _, h := range hist {
		n += max(h.DeathCount, 1)
	}
	return n + max(m.DeathCount, 1), len(hist) + 1, len(hist) >= store.DeathHistoryMax
}

// viewDeaths is the parsed x-death header, which the layer fills in
// (most recent first).
func viewDeaths(m store.Message) []xDeath {
	var deaths []xDeath
	_ = json.Unmarshal(m.XDeath, &deaths)
	return deaths
}
