package alerts

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// RunbookBaseURLDefault is docs/RUNBOOK.md in dlq's repository. Every alert
// links to its section there unless the configuration names another copy
// (a fork, an internal documentation site).
const RunbookBaseURLDefault = "https://github.com/dlq/dlq/blob/main/docs/RUNBOOK.md"

// RunbookAnchor is the anchor of the runbook section for rules of kind k.
// docs/RUNBOOK.md carries it as an explicit <a id="…">, so that rewording a
// heading cannot break the links alerts already sent; the deploy tests hold
// the document to these anchors.
func RunbookAnchor(k Kind) string { return "rule-" + string(k) }

// runbookURL is the runbook_url annotation of an alert of kind k: the
// section of the runbook at base, or nothing when there is no base.
func runbookURL(base string, k Kind) string {
	if base == "" {
		return ""
	}
	return base + "#" + RunbookAnchor(k)
}

// runbookOf is the runbook_url of rule r's alerts: its own, or its
// kind's section of the rule set's runbook.
func (rs RuleSet) runbookOf(r Rule) string {
	if r.RunbookURL != "" {
		return r.RunbookURL
	}
	return runbookURL(rs.RunbookBaseURL, r.Kind)
}

// checkRunbookURL accepts an absolute http(s) URL: a rule's own runbook,
// which may name its section with a #fragment.
func checkRunbookURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("must be an absolute http:// or https:// URL, got %q", redactRunbook(s))
	}
	return nil
}

// checkRunbookBaseURL accepts an absolute http(s) URL without a fragment:
// the fragment is where each alert's section goes.
func checkRunbookBaseURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("must be an absolute http:// or https:// URL of the runbook (default %s), got %q", RunbookBaseURLDefault, redactRunbook(s))
	case strings.Contains(s, "#"):
		return errors.New("must not have a #fragment: each alert adds the anchor of its own section")
	}
	return nil
}

// redactRunbook quotes a runbook URL without any password it carries.
func redactRunbook(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "<unparseable url>"
}
