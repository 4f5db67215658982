package migrations

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// alterTable finds the tables a migration alters (ALTER TABLE [IF EXISTS]
// [ONLY] name).
var alterTable = regexp.MustCompile(`(?i)\bALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?([a-z_][a-z0-9_]*)`)

// Each migration after the baseline that runs in one transaction alters
// at most one table: in one transaction, a table locked by the first ALTER
// stays locked while the next waits for its own table behind a long
// reader, and the migrator's retries stall the first table's traffic again
// and again (docs/UPGRADING.md; 00100 and 00110 once did that to
// replay_tasks). Altering several tables takes NO TRANSACTION, each
// statement safe to run again.
func TestOneTablePerMigrationTransaction(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f.Version <= Baseline {
			continue
		}
		b, err := fs.ReadFile(FS, f.Name)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if strings.Contains(text, "+goose NO TRANSACTION") {
			continue
		}
		up, _, _ := strings.Cut(text, "+goose Down")
		var tables []string
		for _, line := range strings.Split(up, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--") {
				continue
			}
			for _, m := range alterTable.FindAllStringSubmatch(line, -1) {
				if name := strings.ToLower(m[1]); !slices.Contains(tables, name) {
					tables = append(tables, name)
				}
			}
		}
		if len(tables) > 1 {
			t.Errorf("%s alters %v in one transaction: make it NO TRANSACTION, each statement safe to run again", f.Name, tables)
		}
	}
}
