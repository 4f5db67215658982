package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Replication is what the server dlq writes to knows of its streaming
// standbys, read for /readyz: dlq acknowledges a dead letter to RabbitMQ
// once PostgreSQL committed it, so a failover to a standby that had not
// received that commit loses a message RabbitMQ has already forgotten.
// Only synchronous replication rules that out.
type Replication struct {
	// Standbys streaming from the server, by application_name.
	Standbys []Standby
	// SynchronousCommit is dlq's session setting synchronous_commit.
	SynchronousCommit string
	// SynchronousStandbyNames is the server's synchronous_standby_names.
	SynchronousStandbyNames string
}

// Standby is one row of pg_stat_replication.
type Standby struct {
	Name string
	// SyncState is sync_state: async, potential, sync or quorum; "" when
	// dlq's role may not see it (it needs pg_monitor or
	// pg_read_all_stats).
	SyncState string
}

// Replication reads pg_stat_replication and the settings that decide
// whether a commit waits for a standby.
func (s *Store) Replication(ctx context.Context) (Replication, error) {
	var r Replication
	var names, states []string
	err := s.pool.QueryRow(ctx, `
SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
       coalesce(array_agg(coalesce(application_name, '') ORDER BY application_name) FILTER (WHERE pid IS NOT NULL), '{}'),
       coalesce(array_agg(coalesce(sync_state, '') ORDER BY application_name) FILTER (WHERE pid IS NOT NULL), '{}')
FROM (SELECT 1) AS one LEFT JOIN pg_stat_replication ON true`).Scan(&r.SynchronousCommit, &r.SynchronousStandbyNames, &names, &states)
	if err != nil {
		return Replication{}, fmt.Errorf("store: read replication state: %w", err)
	}
	for i, name := range names {
		r.Standbys = append(r.Standbys, Standby{Name: name, SyncState: states[i]})
	}
	return r, nil
}

// Synchronous reports whether a commit dlq makes waits until a standby
// has it: a standby is synchronous (sync or quorum) and the session's
// synchronous_commit waits for it (on, remote_write or remote_apply).
func (r Replication) Synchronous() bool {
	if !slices.Contains([]string{"on", "remote_write", "remote_apply"}, r.SynchronousCommit) {
		return false
	}
	return slices.ContainsFunc(r.Standbys, func(s Standby) bool { return s.SyncState == "sync" || s.SyncState == "quorum" })
}

// Detail says in one line what a failover would do to dlq's commits.
func (r Replication) Detail() string {
	if len(r.Standbys) == 0 {
		return "replication: no standby streaming from this server"
	}
	var sync, other []string
	hidden := false
	for _, s := range r.Standbys {
		switch s.SyncState {
		case "sync", "quorum":
			sync = append(sync, s.Name)
		case "":
			hidden = true
			other = append(other, s.Name)
		default:
			other = append(other, s.Name+" ("+s.SyncState+")")
		}
	}
	switch {
	case hidden && len(sync) == 0:
		return "replication: unknown: the state of standbys " + strings.Join(other, ", ") + " is not visible to dlq's role (grant it pg_monitor)"
	case r.Synchronous():
		return "replication: synchronous to " + strings.Join(sync, ", ") + ": a failover to a synchronous standby loses no committed dead letter"
	case len(sync) > 0:
		return "replication: asynchronous: synchronous_commit is " + r.SynchronousCommit + ", so commits do not wait for " + strings.Join(sync, ", ") + "; a failover can lose dead letters already acknowledged to RabbitMQ"
	default:
		return "replication: asynchronous to " + strings.Join(other, ", ") + ": a failover can lose dead letters already acknowledged to RabbitMQ (set synchronous_standby_names)"
	}
}

// ReplicationDetail is the Detail of the replication state for /readyz,
// or what kept it from being read.
func (s *Store) ReplicationDetail(ctx context.Context) string {
	r, err := s.Replication(ctx)
	if err != nil {
		return "replication: unknown: " + err.Error()
	}
	return r.Detail()
}
