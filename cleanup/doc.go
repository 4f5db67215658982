// Package cleanup decides what dlq stops keeping: resolved messages past
// their retention, messages over the capacity caps, and bookkeeping records
// past their expiry. It is the work of two cron jobs, cleanup
// (Cleaner.DeleteExpired) and capacity (Cleaner.EnforceCapacity); package
// cron schedules them, on one instance per tick, and passes each call the
// run's lease. Every write here is fenced by that lease (see package cron),
// so an instance that lost the job deletes nothing.
//
// # Retention and expiry
//
// DeleteExpired deletes replayed and acknowledged messages older than their
// retention (30 days by default; pending and replaying never), in batches
// of 1,000, each its own transaction with its own timeout, adjusting the
// summary and failure-group counters and writing an audit row in the same
// transaction, until a batch comes back short. Then it expires
// control-command answers, finished replay tasks, old job runs,
// ingest_inflight batches that no delivery can come back to any more
// (store.DeleteStaleInflight; ingest_inflight_ttl) and, if configured, old
// audit rows. Deletions are counted in dlq_cleanup_deleted_total{status}.
//
// An age of 0 in the configuration keeps records forever; KeepForever and
// ConfiguredTTL are the one place that decides how a Config says so.
//
// # Capacity
//
// EnforceCapacity keeps the store under max_messages and max_bytes by
// evicting the oldest resolved messages first, pending ones only when
// allowed; every eviction is counted in dlq_capacity_evicted_total,
// audited and logged, and the capacity alert rule fires while the store is
// at its cap.
package cleanup
