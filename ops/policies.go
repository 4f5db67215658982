package ops

import (
	"context"
	"fmt"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/store"
)

// PoliciesView and PolicyView are the cron service's views of the
// policies, named here so that a door needs no more than this package.
type (
	PoliciesView = cron.PoliciesView
	PolicyView   = cron.PolicyView
)

// policyVisible reports whether p may see (and, with the role, pause) a
// policy: an unscoped caller every one; a scoped caller those that name
// only queues within its scope (a policy without queues acts on every
// queue).
func policyVisible(p auth.Principal, pol cron.Policy) bool {
	return p.Queues == nil || (len(pol.Queues) > 0 && subset(pol.Queues, p.Queues))
}

// Policies returns the automatic replay policies the caller may see, with
// their state.
func (s *Service) Policies(ctx context.Context, c Caller) (PoliciesView, error) {
	if err := Authorize(c.Principal, ActListPolicies); err != nil {
		return PoliciesView{}, err
	}
	if s.cfg.Cron == nil {
		return PoliciesView{}, unavailable("the automatic replay policies are not available on this instance")
	}
	v, err := s.cfg.Cron.Policies(ctx)
	if err != nil {
		return PoliciesView{}, err
	}
	out := v
	out.Policies = []PolicyView{}
	for _, pv := range v.Policies {
		if policyVisible(c.Principal, pv.Policy) {
			out.Policies = append(out.Policies, pv)
		}
	}
	return out, nil
}

// Policy returns one policy the caller may see; store.ErrNotFound for one
// that does not exist or is outside its scope.
func (s *Service) Policy(ctx context.Context, c Caller, name string) (PolicyView, error) {
	v, err := s.Policies(ctx, c)
	if err != nil {
		return PolicyView{}, err
	}
	for _, pv := range v.Policies {
		if pv.Name == name {
			return pv, nil
		}
	}
	return PolicyView{}, fmt.Errorf("policy %q: %w", name, store.ErrNotFound)
}

// PausePolicy stops a policy until it is resumed: its job starts no more
// attempts (tasks already running go on; cancel them to stop them too).
// Audited, with reason.
func (s *Service) PausePolicy(ctx context.Context, c Caller, name, reason string) (PolicyView, error) {
	return s.setPaused(ctx, c, name, true, reason)
}

// ResumePolicy lets a paused policy run again from its next run.
func (s *Service) ResumePolicy(ctx context.Context, c Caller, name string) (PolicyView, error) {
	return s.setPaused(ctx, c, name, false, "")
}

func (s *Service) setPaused(ctx context.Context, c Caller, name string, paused bool, reason string) (PolicyView, error) {
	if err := Authorize(c.Principal, ActPausePolicy); err != nil {
		return PolicyView{}, err
	}
	if err := CheckText("reason", reason); err != nil {
		return PolicyView{}, err
	}
	if _, err := s.Policy(ctx, c, name); err != nil {
		return PolicyView{}, err
	}
	if _, err := s.st.SetPolicyPaused(ctx, name, paused, reason, c.actor()); err != nil {
		return PolicyView{}, err
	}
	s.log.Info("automatic replay policy "+map[bool]string{true: "paused", false: "resumed"}[paused], "policy", name,
		"actor", c.Principal.Name, "via", c.Via)
	return s.Policy(ctx, c, name)
}
