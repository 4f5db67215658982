package migrations

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// Latest is the newest migration this build carries: the schema version
// it expects (goose's version, the file's number) and the file's name.
// `dlq version` prints it; a database migrated by this build is at it.
func Latest() (version int64, name string, err error) {
	names, err := fs.Glob(FS, "*.sql")
	if err != nil {
		return 0, "", fmt.Errorf("migrations: list the embedded files: %w", err)
	}
	for _, n := range names {
		num, _, ok := strings.Cut(n, "_")
		if !ok {
			return 0, "", fmt.Errorf("migrations: %s has no NNNNN_ prefix", n)
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, "", fmt.Errorf("migrations: %s: its number: %w", n, err)
		}
		if v > version {
			version, name = v, n
		}
	}
	if name == "" {
		return 0, "", fmt.Errorf("migrations: no migration file is embedded")
	}
	return version, name, nil
}
