package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
