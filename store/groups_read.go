package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Reading failure groups (groups.go computes and counts them): the groups
// as the API shows them, and their queries.

// Group is one failure group as the API shows it.
type Group struct {
	ID          string `json:"id"`
	SourceQueue string `json:"source_queue"`
	Reason      string `json:"reason"`
	FailureType string `json:"failure_type"`
	Pattern     string `json:"pattern"`
	// Category is the failure category of every message of the group (it
	// is part of the group's key).
	Category      string    `json:"category"`
	SampleMessage string    `json:"sample_message"`
	Counts        Counts    `json:"counts"`
	Total         int64     `json:"total"`
	FirstSeen     time.Time `json:"first_seen"`
	LastSeen      time.Time `json:"last_seen"`
	// Encryption is set for a group whose text is sealed, once ops opened
	// it (see Message.Encryption).
	Encryption *EncryptionInfo `json:"encryption,omitempty"`
	// Sealed is the group's sealed pattern and sample (a crypt blob,
	// OpenGroupText), nil for a plain one.
	Sealed []byte `json:"-"`
}

// Counts are message counts by status.
type Counts struct {
	Pending      int64 `json:"pending"`
	Replaying    int64 `json:"replaying"`
	Replayed     int64 `json:"replayed"`
	Acknowledged int64 `json:"acknowledged"`
}

func (c *Counts) add(status string, n int64) {
	switch status {
	case StatusPending:
		c.Pending += n
	case StatusReplaying:
		c.Replaying += n
	case StatusReplayed:
		c.Replayed += n
	case StatusAcknowledged:
		c.Acknowledged += n
	}
}

func (c Counts) plus(o Counts) Counts {
	return Counts{c.Pending + o.Pending, c.Replaying + o.Replaying, c.Replayed + o.Replayed, c.Acknowledged + o.Acknowledged}
}

// Total is the sum of every status.
func (c Counts) Total() int64 { return c.Pending + c.Replaying + c.Replayed + c.Acknowledged }

// GroupQuery selects failure groups.
type GroupQuery struct {
	// SourceQueue restricts to one queue. Optional.
	SourceQueue string
	// Status orders by that status's count and hides groups with none
	// ("all": by total). Optional; default pending.
	Status string
	// Category restricts to groups of these categories (a comma list).
	// Optional.
	Category string
	// Limit caps the result. Optional; default 50, at most 1000.
	Limit int
	// Scope restricts to these queues; nil means all.
	Scope []string
}

// Groups lists failure groups, largest first. It reads only
// failure_groups, whatever the number of messages.
func (s *Store) Groups(ctx context.Context, q GroupQuery) ([]Group, error) {
	order := "g.pending"
	switch q.Status {
	case "", StatusPending:
	case StatusReplaying, StatusReplayed, StatusAcknowledged:
		order = "g." + q.Status
	case "all":
		order = "(g.pending + g.replaying + g.replayed + g.acknowledged)"
	default:
		return nil, fmt.Errorf("%w: status %q must be one of %s or all", ErrInvalidFilter, q.Status, strings.Join(Statuses, ", "))
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	var args sqlArgs
	conds := []string{order + " > 0"}
	if q.SourceQueue != "" {
		conds = append(conds, "g.source_queue = "+args.add(q.SourceQueue))
	}
	if q.Scope != nil {
		conds = append(conds, "g.source_queue = ANY("+args.add(q.Scope)+")")
	}
	if q.Category != "" {
		cats, err := parseCategories(q.Category)
		if err != nil {
			return nil, err
		}
		conds = append(conds, "g.category = ANY("+args.add(cats)+")")
	}
	rows, err := s.pool.Query(ctx, `
SELECT g.id, g.source_queue, g.reason, g.failure_type, g.pattern, g.category, g.sample_message,
       g.pending, g.replaying, g.replayed, g.acknowledged, g.first_seen, g.last_seen, g.enc_text
FROM failure_groups g
WHERE `+strings.Join(conds, " AND ")+`
ORDER BY `+order+` DESC, g.id
LIMIT `+args.add(limit), args...)
	if err != nil {
		return nil, fmt.Errorf("store: list failure groups: %w", err)
	}
	return scanGroups(rows)
}

// GetGroup returns one failure group; ErrNotFound when there is none in
// scope.
func (s *Store) GetGroup(ctx context.Context, id string, scope []string) (Group, error) {
	gid, err := ParseGroupID(id)
	if err != nil {
		return Group{}, err
	}
	rows, err := s.pool.Query(ctx, `
SELECT g.id, g.source_queue, g.reason, g.failure_type, g.pattern, g.category, g.sample_message,
       g.pending, g.replaying, g.replayed, g.acknowledged, g.first_seen, g.last_seen, g.enc_text
FROM failure_groups g
WHERE g.id = $1 AND ($2::text[] IS NULL OR g.source_queue = ANY($2))`, gid, scope)
	if err != nil {
		return Group{}, fmt.Errorf("store: get failure group %s: %w", id, err)
	}
	groups, err := scanGroups(rows)
	if err != nil {
		return Group{}, err
	}
	if len(groups) == 0 {
		return Group{}, fmt.Errorf("store: failure group %s: %w", id, ErrNotFound)
	}
	return groups[0], nil
}

func scanGroups(rows pgx.Rows) ([]Group, error) {
	defer rows.Close()
	out := []Group{}
	for rows.Next() {
		var (
			g  Group
			id int64
		)
		if err := rows.Scan(&id, &g.SourceQueue, &g.Reason, &g.FailureType, &g.Pattern, &g.Category, &g.SampleMessage,
			&g.Counts.Pending, &g.Counts.Replaying, &g.Counts.Replayed, &g.Counts.Acknowledged,
			&g.FirstSeen, &g.LastSeen, &g.Sealed); err != nil {
			return nil, fmt.Errorf("store: read failure group: %w", err)
		}
		g.ID = FormatGroupID(id)
		g.Total = g.Counts.Total()
		g.FirstSeen, g.LastSeen = g.FirstSeen.UTC(), g.LastSeen.UTC()
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: read failure groups: %w", err)
	}
	return out, nil
}
