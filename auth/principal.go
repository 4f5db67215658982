package auth

import "slices"

// Roles, from least to most powerful. Each includes the ones before it.
const (
	RoleViewer   = "viewer"   // read messages (bodies only if allowed), stats, status
	RoleOperator = "operator" // + replay, acknowledge
	RoleAdmin    = "admin"    // + delete, purge, audit
)

// Principal is an authenticated caller.
type Principal struct {
	// Name identifies the token in audit rows and logs (never the secret).
	Name string
	// Role is RoleViewer, RoleOperator or RoleAdmin.
	Role string
	// Queues restricts the caller to these source queues; nil means all.
	Queues []string
	// Bodies allows a viewer to see message bodies.
	Bodies bool
}

var rank = map[string]int{RoleViewer: 1, RoleOperator: 2, RoleAdmin: 3}

// Can reports whether p's role includes role.
func (p Principal) Can(role string) bool { return rank[p.Role] >= rank[role] && rank[role] > 0 }

// SeesQueue reports whether queue is within p's scope.
func (p Principal) SeesQueue(queue string) bool {
	return p.Queues == nil || slices.Contains(p.Queues, queue)
}
