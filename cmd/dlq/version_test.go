package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/migrations"
)

// TestVersionNamesReleaseAndSchema: `dlq version` prints the release and
// the schema version the build migrates to, which an operator compares
// before a rolling upgrade. Built by make (DLQ_TEST_DLQ_BIN), the release
// is the one in the file VERSION.
func TestVersionNamesReleaseAndSchema(t *testing.T) {
	t.Parallel()
	bin := dlqBinary(t)
	code, out, errOut := execDLQ(t, bin, "", "", "version")
	require.Equal(t, 0, code, "stderr: %s", errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, "output:\n%s", out)
	require.True(t, strings.HasPrefix(lines[0], "dlq "), "first line: %q", lines[0])
	if os.Getenv("DLQ_TEST_DLQ_BIN") != "" {
		release, err := os.ReadFile("../../VERSION")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(lines[0], "dlq "+strings.TrimSpace(string(release))+" (commit "),
			"make stamps the release of VERSION and the commit: %q", lines[0])
	}
	v, name, err := migrations.Latest()
	require.NoError(t, err)
	require.Equal(t, "schema "+strings.TrimLeft(name[:5], "0")+" ("+name+")", lines[1])
	require.NotZero(t, v)
	require.True(t, strings.HasPrefix(lines[2], "go go1."), "third line: %q", lines[2])
}
