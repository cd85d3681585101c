// Package migrations embeds the numbered SQL files that make up studioctl's
// schema. They are applied by internal/migrate through goose.
package migrations

import "embed"

// FS holds every migration file, named NNNNN_description.sql.
//
//go:embed *.sql
var FS embed.FS
