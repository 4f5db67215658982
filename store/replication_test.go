package store_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// The test server streams to no standby; its settings come back as set.
// (test/cluster reads a real synchronous and asynchronous standby.)
func TestReplicationWithoutStandby(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	r, err := st.Replication(context.Background())
	require.NoError(t, err)
	require.Empty(t, r.Standbys)
	require.Equal(t, "on", r.SynchronousCommit)
	require.False(t, r.Synchronous())
	require.Equal(t, "replication: no standby streaming from this server", r.Detail())
	require.Equal(t, r.Detail(), st.ReplicationDetail(context.Background()))
}

func TestReplicationDetail(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		r    store.Replication
		sync bool
		want string
	}{
		{"synchronous", store.Replication{SynchronousCommit: "on", Standbys: []store.Standby{{"s1", "sync"}, {"s2", "potential"}}},
			true, "replication: synchronous to s1: a failover to a synchronous standby loses no committed dead letter"},
		{"quorum, remote_apply", store.Replication{SynchronousCommit: "remote_apply", Standbys: []store.Standby{{"s1", "quorum"}, {"s2", "quorum"}}},
			true, "replication: synchronous to s1, s2: a failover to a synchronous standby loses no committed dead letter"},
		{"asynchronous", store.Replication{SynchronousCommit: "on", Standbys: []store.Standby{{"s1", "async"}}},
			false, "replication: asynchronous to s1 (async): a failover can lose dead letters already acknowledged to RabbitMQ (set synchronous_standby_names)"},
		{"commits do not wait", store.Replication{SynchronousCommit: "local", Standbys: []store.Standby{{"s1", "sync"}}},
			false, "replication: asynchronous: synchronous_commit is local, so commits do not wait for s1; a failover can lose dead letters already acknowledged to RabbitMQ"},
		{"not visible", store.Replication{SynchronousCommit: "on", Standbys: []store.Standby{{"s1", ""}}},
			false, "replication: unknown: the state of standbys s1 is not visible to dlq's role (grant it pg_monitor)"},
		{"none", store.Replication{SynchronousCommit: "on"}, false, "replication: no standby streaming from this server"},
	} {
		require.Equal(t, c.sync, c.r.Synchronous(), c.name)
		require.Equal(t, c.want, c.r.Detail(), c.name)
	}
}
