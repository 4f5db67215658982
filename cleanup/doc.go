// Package cleanup runs dlq's cron jobs: summary reconciliation, retention
// cleanup, capacity enforcement and alert evaluation, each on exactly one
// instance per tick however many `dlq serve` instances share the database.
//
// # Ticks, leases and fencing
//
// Every instance schedules every job (robfig/cron, with panic recovery), so
// a job does not depend on any one instance staying up. A tick is a job's
// scheduled time slot: the activation time of its schedule, which every
// instance computes alike (cron expressions in UTC, and "@every d" aligned to
// multiples of d since the Unix epoch rather than to process start). At each
// tick every instance tries, in one transaction:
//
//  1. to take the job's lease (job_leases: holder, token, expires_at): it is
//     taken when free, expired, or already this instance's. The token grows
//     by one whenever the lease changes hands;
//  2. to claim the tick: INSERT INTO job_runs (job, tick) ON CONFLICT DO
//     NOTHING. No row back means someone else has the tick; that is not an
//     error.
//
// Only the instance that gets both runs the job. While it runs, it renews
// the lease every TTL/3. Every write the job makes is fenced: the store runs
// it in a transaction that first locks the lease row FOR SHARE where token =
// the run's token, so an acquisition by another instance waits for the
// write to commit, and a write after the token moved on finds no row and
// fails with store.ErrLeaseLost. A paused (SIGSTOP) or partitioned former
// holder therefore cannot write after losing the lease; if it was paused
// inside a fenced transaction, PostgreSQL ends its session after a few
// idle seconds (idle_in_transaction_session_timeout), which releases the
// row. A holder that dies stops renewing; its lease expires after the TTL
// (by default the job's interval, at most 30 s) and the next tick runs on
// another instance.
//
// A panic inside a job is recovered by the scheduler, recorded as a failed
// run with its stack, and the process carries on. A tick that finds the
// previous run of the same job still running on this instance is skipped.
//
// Runs are recorded in job_runs (tick, instance, token, start, end, outcome,
// rows affected, error), listed by GET /api/v1/jobs and counted in
// dlq_job_runs_total{job,outcome}, dlq_job_duration_seconds{job} and
// dlq_job_last_success_timestamp_seconds{job} (read from job_runs, so every
// instance exports the cluster-wide value).
//
// # The jobs
//
//   - summary: queue_summary is maintained by every writer in its own
//     transaction; this job proves it and repairs drift, counting repairs in
//     dlq_summary_repairs_total. A pass recounts each source queue in one
//     snapshot and applies the difference as an increment (see
//     store.ReconcileQueue), so it never locks writers out. The first pass
//     is the bootstrap of an existing table; passes repeat every
//     ReconcileInterval and spread over ticks within a time budget.
//   - cleanup: deletes replayed and acknowledged messages older than their
//     retention (30 days by default; pending and replaying never), in
//     batches of 1,000, each its own transaction with its own timeout,
//     adjusting the summary and failure-group counters and writing an
//     audit row in the same transaction, until a batch comes back short.
//     Then it expires control-command answers, finished replay tasks, old
//     job runs and, if configured, old audit rows.
//   - capacity: keeps the store under max_messages and max_bytes by
//     evicting the oldest resolved messages first, pending ones only when
//     allowed; every eviction is counted, audited and logged, and the
//     capacity alert rule fires while the store is at its cap.
//   - alerts: loads the saved alert state, reads a snapshot from the
//     summary, evaluates the rules (package alerts), saves the new state
//     under the lease and then notifies, so an instance that lost the lease
//     sends nothing.
//
// # Metrics read on scrape
//
// dlq_dead_messages{source_queue,status}, dlq_dead_message_bytes,
// dlq_oldest_pending_age_seconds{source_queue} and dlq_capacity_used_ratio
// come from a collector that reads queue_summary and one index probe per
// queue on each scrape: O(queues), never a scan of dead_messages, and the
// same on every instance.
package cleanup
