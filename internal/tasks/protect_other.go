//go:build !linux

package tasks

// ProtectSecrets does nothing on systems other than Linux
// (docs/jobs-processes.md): run jobs that must not see the database as
// another user there.
func ProtectSecrets() error { return nil }

// HideArgSecrets does nothing on systems other than Linux: there, give the
// password through STUDIO_DATABASE_URL, PGPASSWORD or a passfile rather
// than --database-url.
func HideArgSecrets() error { return nil }
