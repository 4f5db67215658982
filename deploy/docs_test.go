package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// metricRowRE is a row of docs/OPERATIONS.md's metrics table: the name, its
// type and where it is explained.
var metricRowRE = regexp.MustCompile("(?m)^\\| `(dlq_[a-z0-9_]+)` \\| (counter|gauge|histogram) \\|[^|]*\\| ([^|]+) \\|$")

// TestDocsNameEveryMetric: docs/OPERATIONS.md's "Metrics" table names
// every metric dlq defines, once, and no other; a row that sends the
// reader to another document is sent to one that names the metric.
func TestDocsNameEveryMetric(t *testing.T) {
	t.Parallel()
	defined := exportedMetrics(t)
	text := string(readRepoFile(t, "docs/OPERATIONS.md"))
	start := strings.Index(text, "\n### Metrics\n")
	require.GreaterOrEqual(t, start, 0, "docs/OPERATIONS.md has no Metrics section")
	section := text[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	listed := map[string]bool{}
	for _, m := range metricRowRE.FindAllStringSubmatch(section, -1) {
		name, where := m[1], strings.TrimSpace(m[3])
		require.False(t, listed[name], "docs/OPERATIONS.md lists %s twice", name)
		listed[name] = true
		require.True(t, defined[name], "docs/OPERATIONS.md lists %s, which dlq does not define", name)
		if doc, _, ok := strings.Cut(where, ","); ok && strings.HasPrefix(doc, "docs/") {
			require.Contains(t, string(readRepoFile(t, doc)), name, "docs/OPERATIONS.md sends %s to %s, which does not name it", name, doc)
		}
	}
	var missing []string
	for name := range defined {
		if !listed[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "docs/OPERATIONS.md's Metrics table does not list these metrics dlq defines")
}
