package imports_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/dlq/dlq/"

// rules maps a package (relative to the module) to the module packages it
// may import. "*" allows every one. A package with no row may import
// nothing of the module but the shared helpers (row "all").
type rules map[string][]string

// readRules reads the table under "## Dependencies" in
// docs/ARCHITECTURE.md: | `package` | `a`, `b` or — |.
func readRules(t *testing.T, doc string) rules {
	t.Helper()
	f, err := os.Open(doc)
	require.NoError(t, err)
	defer f.Close()
	r := rules{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Dependencies"
			continue
		case !in || !strings.HasPrefix(line, "| `"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.Len(t, cells, 2, "a Dependencies row has two cells: %s", line)
		var allowed []string
		for _, a := range strings.Split(cells[1], ",") {
			a = strings.Trim(strings.TrimSpace(a), "`")
			if a != "" && a != "—" {
				allowed = append(allowed, a)
			}
		}
		for _, p := range strings.Split(cells[0], ",") {
			r[strings.Trim(strings.TrimSpace(p), "`")] = allowed
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, r, "no Dependencies table in %s", doc)
	return r
}

// allows reports whether pkg may import dep. A row names a package or a
// folder of packages ("cmd/*" covers cmd/dlq).
func (r rules) allows(pkg, dep string) bool {
	if slices.Contains(r["all"], dep) {
		return true
	}
	allowed, ok := r[pkg]
	for p := pkg; !ok && p != "."; {
		p = filepath.Dir(p)
		allowed, ok = r[p+"/*"]
	}
	return slices.Contains(allowed, "*") || slices.Contains(allowed, dep)
}

// violations lists every import the rules forbid, as "pkg -> dep".
func (r rules) violations(graph map[string][]string) []string {
	var out []string
	for pkg, deps := range graph {
		for _, d := range deps {
			if !r.allows(pkg, d) {
				out = append(out, pkg+" -> "+d)
			}
		}
	}
	slices.Sort(out)
	return out
}

// importGraph is the module's non-test imports between its own packages,
// from go list.
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		graph[pkg] = nil
		for _, d := range f[1:] {
			if strings.HasPrefix(d, module) {
				graph[pkg] = append(graph[pkg], strings.TrimPrefix(d, module))
			}
		}
	}
	return graph
}

func TestImportsFollowTheDependencyPicture(t *testing.T) {
	t.Parallel()
	r := readRules(t, "../../docs/ARCHITECTURE.md")
	graph := importGraph(t)
	require.Empty(t, r.violations(graph), "imports the dependency picture in docs/ARCHITECTURE.md forbids: "+
		"change the code, or the picture if the design changed")
	// Every package of the module has its row (or a folder's), so a new
	// package is placed in the picture on purpose.
	for pkg := range graph {
		if strings.HasPrefix(pkg, "test/") || pkg == "" {
			continue
		}
		_, ok := r[pkg]
		for p := pkg; !ok && p != "."; {
			p = filepath.Dir(p)
			_, ok = r[p+"/*"]
		}
		require.True(t, ok, "package %s has no row in the Dependencies table of docs/ARCHITECTURE.md", pkg)
	}
}

// The checker itself: an import the picture forbids is found, with the
// classic case of the AMQP layer reaching into the schema.
func TestViolationsAreFound(t *testing.T) {
	t.Parallel()
	r := rules{
		"all":    {"internal/redact"},
		"broker": nil,
		"store":  {"migrations"},
		"cmd/*":  {"*"},
	}
	graph := map[string][]string{
		"broker":  {"store", "internal/redact"},
		"store":   {"migrations"},
		"cmd/dlq": {"broker", "store"},
	}
	require.Equal(t, []string{"broker -> store"}, r.violations(graph))
	delete(graph, "broker")
	require.Empty(t, r.violations(graph))
	require.False(t, r.allows("unlisted", "store"), "a package with no row imports nothing")
}
