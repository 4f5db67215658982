// Package alerts decides when a dead-letter situation deserves a human's
// attention and tells the receivers operators already use: the log, any JSON
// webhook, Slack-compatible incoming webhooks and Alertmanager.
//
// # Rules
//
// A Rule compares one number per source queue (pending messages, age of the
// oldest pending message, repeat failures, arrivals in the last five
// minutes) or one number for the whole store (capacity used, in percent)
// against a threshold: "value > Threshold". DefaultRules holds the defaults;
// Overrides change threshold, hold time or enablement for one source queue,
// because a queue that legitimately holds a thousand dead messages must not
// drown the alerts of one that should hold none. Every alert links to the
// runbook section for its kind (RuleSet.RunbookBaseURL, RunbookAnchor), so
// whoever is paged lands on what to do. The numbers come in a
// Snapshot the caller reads from the summary table, so a check costs
// O(source queues) whatever the number of stored messages. The package never
// touches the database itself: SnapshotSource and StateStore are the seams.
//
// # State machine
//
// Each (rule, source queue) pair moves through
//
//	inactive --true--> pending --true for For--> firing --false--> resolved --> inactive
//	              \--------- true, For = 0 ---------^
//	pending --false--> inactive   (silently: a blip shorter than For is no incident)
//
// Receivers hear of a pair exactly twice per incident: once when it fires
// and once when it resolves; a pair that stays firing is repeated only every
// RepeatInterval (0 = never). A pair that turns true again after resolving is
// a new incident and waits out For again. A pair whose rule is removed or
// disabled, or whose queue disappears from the snapshot, resolves like any
// other, so no receiver is left holding an alert nobody will end.
//
// # Why Evaluate is pure and its state persisted
//
// The alert check is a cron job that runs on one dlq instance at a time,
// possibly a different one every tick. Durations like "for 5 minutes" and
// "already notified" therefore cannot live in memory. Evaluate takes the
// previous State, a Snapshot and the RuleSet and returns the next State and
// the notifications; it reads no clock (time is Snapshot.At, best taken from
// the database so instances agree) and has no side effects. The State is a
// small JSON document the caller saves in PostgreSQL; the next instance loads
// it and continues as if it had been there all along. Purity also makes the
// state machine testable over hours of simulated time without sleeping.
//
// Checker ties it together for the scheduler: load, snapshot, Evaluate, save,
// then notify. Saving comes first because the save is fenced by the job's
// lease: an instance that lost the lease cannot save and so sends nothing,
// which is what keeps notifications free of duplicates across instances.
//
// # Notifiers and the retry contract
//
// A Notifier delivers a batch of alerts and says, on failure, whether trying
// again could help: network errors, 5xx and 429 are retryable; other 4xx
// mean the receiver rejected the payload and will reject it again. The
// Dispatcher fans a batch out to every notifier in parallel and retries only
// retryable failures, with exponential backoff (500 ms doubling to 30 s, a
// bounded number of attempts) that stops as soon as the context ends. It
// counts every outcome in dlq_alert_notifications_total{notifier,result} and
// sets dlq_alerts_firing{rule} from the State, with a zero series for every
// rule so dashboards see "nothing firing" rather than "no data". Given a
// StateLoader (DispatcherConfig.States), it reports the saved State on each
// scrape instead of only the one this instance evaluated: the evaluation
// moves between instances, and every one must show the same numbers. A
// State past its StaleAfter (CheckerConfig.Schedule sets it: StaleBound)
// is reported as nothing firing, with dlq_alerts_stale at 1: once nobody
// evaluates, its alerts are not known to fire, and views show them as
// PhaseUnknown (State.ViewAt).
//
// Alertmanager is the one receiver that forgets: an alert whose endsAt passes
// is resolved. The AlertmanagerNotifier sends firing alerts with an endsAt a
// few evaluation intervals ahead and, as a Refresher, receives every firing
// alert on every evaluation, the way Prometheus feeds it; Alertmanager
// deduplicates and handles grouping, silences and routing itself.
package alerts
