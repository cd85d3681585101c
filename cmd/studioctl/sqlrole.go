package main

import (
	"fmt"
	"strings"

	"github.com/studioctl/studioctl/internal/config"
	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/tasks"
)

// sqlJobsRole refuses a configuration whose sql: jobs would run as the
// replica's own role without saying so (issue 21, item 3): that role may
// write run history and call the event writer, and usually owns the
// schema, so only a login of its own (database.sql_url, a member of
// studio_sql_job) keeps a job's text from forging runs and events. The
// embedded default provisions such a login itself (docs/embedded.md), so
// onEmbedded is never refused; database.sql_as_replica: true keeps the
// replica's role, with its WARN at start (docs/jobs-sql.md). A refusal is
// a configuration error (exit 2).
func sqlJobsRole(cfg *config.Config, list []jobs.Job, onEmbedded bool) error {
	if cfg.Database.SQLURL != "" || cfg.Database.SQLAsReplica || onEmbedded {
		return nil
	}
	var ids []string
	for _, j := range list {
		if j.Spec.Kind() == tasks.KindSQL {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	named := strings.Join(ids, ", ")
	if len(ids) > 3 {
		named = strings.Join(ids[:3], ", ") + fmt.Sprintf(" and %d more", len(ids)-3)
	}
	return &config.Error{Msg: fmt.Sprintf("%s declares sql: jobs (%s) and database.sql_url (STUDIO_DATABASE_SQL_URL) is not set: "+
		"they would run as the replica's own database role, which can write run history and events; "+
		"set database.sql_url to a login of the role studio_sql_job (docs/roles.sql, docs/jobs-sql.md), "+
		"or set database.sql_as_replica: true (STUDIO_DATABASE_SQL_AS_REPLICA=true) to run them as the replica's role knowingly",
		cfg.File, named)}
}
