// Package jobtask binds a job of the model (internal/jobs) to the task
// that runs it (internal/tasks): the command, SQL statement or HTTP
// request its configuration names. The host binds the configured jobs;
// the runner executes the bound task. internal/jobs stays the model and
// its parsing only.
package jobtask

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/jobs"
	"github.com/studioctl/studioctl/internal/tasks"
)

// Job is a job with the task the runner executes at its fires.
type Job struct {
	jobs.Job
	Task tasks.Task
}

// DB runs sql tasks: the replica's pool (tasks.SQL).
type DB interface {
	Begin(context.Context) (pgx.Tx, error)
}

// Bind binds j's configured task (jobs.TaskSpec): db runs sql tasks, and
// client (nil: a connection of its own per run) sends http tasks'
// requests. A job whose spec names no task gets none (the runner refuses
// it).
func Bind(j jobs.Job, db DB, client *http.Client) Job {
	return Job{Job: j, Task: Task(j, db, client)}
}

// Task is the task of j's spec, or nil when it names none.
func Task(j jobs.Job, db DB, client *http.Client) tasks.Task {
	switch s := j.Spec; {
	case len(s.Command) > 0:
		return tasks.Command{Argv: s.Command, Env: j.Env}
	case s.SQL != "":
		return tasks.SQL{Statement: s.SQL, DB: db}
	case s.HTTP != nil:
		return tasks.HTTP{Method: s.HTTP.Method, URL: s.HTTP.URL, Headers: s.HTTP.Headers, Body: s.HTTP.Body, Client: client}
	}
	return nil
}
