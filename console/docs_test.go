package console_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

var dataTestRe = regexp.MustCompile(`data-test="([a-z0-9-]+)"`)

// TestDocsNameEveryDataTest: docs/CONSOLE.md's testing contract names
// every data-test name a template carries, so a test written outside
// the code base can find each from the docs.
func TestDocsNameEveryDataTest(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/CONSOLE.md")
	require.NoError(t, err)
	pages, err := filepath.Glob("templates/*.html")
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, m := range dataTestRe.FindAllStringSubmatch(string(b), -1) {
			require.Contains(t, string(doc), "`"+m[1]+"`", "docs/CONSOLE.md does not name data-test %q (%s)", m[1], p)
		}
	}
}
