package migrations

import (
	"cmp"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS

// Baseline is the last migration of the schema dlq had before its
// migrations ran online (the tree of 2026-11-25, before the operations
// layer): every database of an earlier dlq has it. Each migration after it
// holds a lock that stops ingest, replay claims or reads for at most about
// a second (store.MaxMigrationStall; TestMigrationLocks applies every one
// under load) and leaves work over existing rows to a backfill. The ones
// up to it were written for a stopped dlq: on a database older than the
// baseline they rewrite and index tables while ingest waits
// (docs/UPGRADING.md, "Older databases").
const Baseline = 62

// File is one migration file.
type File struct {
	Version int64
	// Name is the file's name, e.g. 00070_death_record.sql.
	Name string
}

// Files lists the migration files in version order.
func Files() ([]File, error) {
	names, err := fs.Glob(FS, "*.sql")
	if err != nil {
		return nil, err
	}
	out := make([]File, 0, len(names))
	for _, n := range names {
		num, _, ok := strings.Cut(n, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("migrations: file %s does not start with its number", n)
		}
		out = append(out, File{Version: v, Name: n})
	}
	slices.SortFunc(out, func(a, b File) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}
