//go:build cluster

package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// EarlierVersion is the dlq the upgrade tests start from: the last commit
// before the operations layer (2026-11-25), whose schema is migrations
// 00001 to 00062 (migrations.Baseline). DLQ_TEST_EARLIER_REV names
// another revision.
const EarlierVersion = "fdd4749"

var (
	earlierMu   sync.Mutex
	earlierBins = map[string]string{}
)

// earlierDLQ returns the dlq binary of git revision rev (EarlierVersion
// unless DLQ_TEST_EARLIER_REV), built from the repository's history with
// git archive and go build, and kept under tmp/earlier/ by commit, so
// later runs reuse it. It needs the history (a fresh clone has it; a
// shallow one does not: git fetch --unshallow).
func earlierDLQ(t *testing.T) string {
	t.Helper()
	rev := EarlierVersion
	if v := os.Getenv("DLQ_TEST_EARLIER_REV"); v != "" {
		rev = v
	}
	earlierMu.Lock()
	defer earlierMu.Unlock()
	if bin, ok := earlierBins[rev]; ok {
		return bin
	}
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", args...).Output()
		if err != nil {
			msg := err.Error()
			if ee, ok := err.(*exec.ExitError); ok {
				msg += ": " + string(ee.Stderr)
			}
			t.Fatalf("git %s: %s (the upgrade tests build dlq %s from the repository's history: a shallow clone needs git fetch --unshallow)",
				strings.Join(args, " "), msg, rev)
		}
		return strings.TrimSpace(string(out))
	}
	root := git("rev-parse", "--show-toplevel")
	commit := git("rev-parse", "--verify", rev+"^{commit}")
	bin := filepath.Join(root, "tmp", "earlier", "dlq-"+commit)
	if _, err := os.Stat(bin); err == nil {
		earlierBins[rev] = bin
		return bin
	}
	src, err := os.MkdirTemp("", "dlq-earlier-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	t.Logf("building dlq %s (%s) into %s", rev, commit[:12], bin)
	archive := exec.Command("sh", "-c", fmt.Sprintf("git archive --format=tar %s | tar -x -C %s", commit, src))
	archive.Dir = root
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("extract dlq %s: %v\n%s", rev, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	// Built aside and renamed into place, so that a build cut short never
	// leaves a broken binary under the name later runs trust.
	tmp := bin + fmt.Sprintf(".%d.tmp", os.Getpid())
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+rev, "-o", tmp, "./cmd/dlq")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		t.Fatalf("build dlq %s: %v\n%s", rev, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	earlierBins[rev] = bin
	return bin
}
