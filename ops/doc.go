// Package ops is dlq's operations layer: the one place that decides who may
// do what to which dead messages. Every front door — the HTTP API (api/),
// the control queue (control/), the web console (console/) and, through
// those two, the CLI — decodes its input, calls a Service method with the
// caller's principal, and encodes the answer. None of them checks a role,
// a queue scope or a threshold itself.
//
// A method owns, in this order:
//   - the role the action needs (rules.go: the permission table, RoleFor
//     and Authorize, which the doors also use to refuse early);
//   - the caller's queue scope: a filter naming a queue outside it is
//     ErrForbidden, and otherwise the scope becomes part of the store
//     filter, so nothing outside it is read, counted or changed in SQL;
//     ids outside it are not found, exactly as if they did not exist;
//   - visibility of replay tasks (TaskVisible) and of the automatic
//     replay policies (policies.go: a scoped caller sees and pauses those
//     of its queues);
//   - the confirmation threshold for large selections by filter, and dry
//     runs;
//   - whether the caller may see message bodies, and which values are
//     masked for it (redaction.go: headers by name, JSON body values by
//     path, for roles below the reveal role);
//   - opening sealed messages (sealed.go): store hands back what it sealed
//     as it is, and the layer opens it only for a read it answers (replay
//     opens what it publishes; nothing else does);
//   - the actor of the audit row, which store writes in the action's own
//     transaction.
//
// It plays the part asynq's Inspector plays for asynq's CLI and web UI,
// and river's client for riverui: one type, every rule once.
//
// Errors map to a handful of sentinels (errors.go) that each door turns
// into its own envelope: ErrForbidden, store.ErrNotFound, ErrInvalid,
// *store.ConfirmError, store.ErrConflict and ErrUnavailable.
package ops
