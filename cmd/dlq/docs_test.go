package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// notAPIClients are the commands that do not call the HTTP API: they run
// dlq, work on its database or send to the control queue.
var notAPIClients = map[string]bool{"serve": true, "migrate": true, "rekey": true, "topology": true,
	"replay": true, "replays": true, "cancel": true, "version": true}

// TestDocsNameEveryCommand: README.md's command list names every command,
// and the lists of the commands that call the HTTP API (docs/API.md's
// and docs/CONFIGURATION.md's, of those reading DLQ_URL) name every one
// that does.
func TestDocsNameEveryCommand(t *testing.T) {
	t.Parallel()
	readme := readRepoDoc(t, "../../README.md")
	api := paragraph(t, readRepoDoc(t, "../../docs/API.md"), "The command line (")
	conf := paragraph(t, readRepoDoc(t, "../../docs/CONFIGURATION.md"), "The operator commands (")
	for _, c := range commands() {
		require.Regexp(t, `dlq `+regexp.QuoteMeta(c.name)+`\b`, readme, "README.md does not name dlq %s", c.name)
		if notAPIClients[c.name] {
			continue
		}
		require.Contains(t, api, "`"+c.name+"`", "docs/API.md's list of the API's clients lacks %s", c.name)
		require.Contains(t, conf, "`"+c.name+"`", "docs/CONFIGURATION.md's list of the commands reading DLQ_URL lacks %s", c.name)
	}
}

func readRepoDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// paragraph is the paragraph of text that starts with start.
func paragraph(t *testing.T, text, start string) string {
	t.Helper()
	i := strings.Index(text, start)
	require.GreaterOrEqual(t, i, 0, "no paragraph starts with %q", start)
	p, _, _ := strings.Cut(text[i:], "\n\n")
	// The command names are backticked one by one; `dlq ls` names ls.
	return strings.ReplaceAll(p, "`dlq ", "`")
}

// TestUsageAligned: dlq's list of commands starts every summary in one
// column, however long the longest name.
func TestUsageAligned(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	usage(&b)
	col := -1
	for _, c := range commands() {
		i := strings.Index(b.String(), "\n  "+c.name+" ")
		require.GreaterOrEqual(t, i, 0, "usage does not list %s", c.name)
		line, _, _ := strings.Cut(b.String()[i+1:], "\n")
		at := strings.Index(line, c.summary)
		require.Positive(t, at, "usage's line of %s: %q", c.name, line)
		if col < 0 {
			col = at
		}
		require.Equal(t, col, at, "the summary of %s starts in another column: %q", c.name, line)
	}
}

// TestDocsNameTheFlagOnlyCommands: docs/API.md's list of the commands
// that take no argument is what the binary does: each listed command
// refuses an argument (exit 2, "takes flags only"), and every command
// that refuses one so is listed. It runs before any call, so the API's
// address is one nothing listens on.
func TestDocsNameTheFlagOnlyCommands(t *testing.T) {
	t.Parallel()
	bin := dlqBinary(t)
	para := paragraph(t, readRepoDoc(t, "../../docs/API.md"), "Flags may come before or after")
	para = strings.Join(strings.Fields(para), " ")
	open, rest, ok := strings.Cut(para, "A command that takes no argument (")
	require.True(t, ok, "docs/API.md: no list of the commands that take no argument in %q", open)
	list, _, _ := strings.Cut(rest, ";")
	list, _, _ = strings.Cut(list, ")")
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(list, -1) {
		listed[m[1]] = true
	}
	require.NotEmpty(t, listed, "docs/API.md's list of the commands that take no argument: %q", list)
	env := []string{"DLQ_URL=http://127.0.0.1:1", "DLQ_TOKEN=t", "DLQ_ADMIN_TOKEN="}
	for _, c := range commands() {
		if notAPIClients[c.name] {
			continue
		}
		code, _, errOut := execDLQEnv(t, bin, env, c.name, "stray-argument")
		refused := code == 2 && strings.Contains(errOut, "takes flags only")
		if listed[c.name] {
			require.True(t, refused, "docs/API.md says dlq %s takes no argument, but it answered %d: %s", c.name, code, errOut)
		} else {
			require.False(t, refused, "dlq %s takes flags only, but docs/API.md's list lacks it: %s", c.name, errOut)
		}
		delete(listed, c.name)
	}
	require.Empty(t, listed, "docs/API.md lists commands dlq does not have")
}
