// Package embedded runs the default database of SPEC §10: with no database
// configured at all, studioctl uses a local PostgreSQL that it runs itself
// from the binaries on the machine. Several processes on one machine share
// it; a file lock makes their start-up safe.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/pgcluster"
)

// DefaultPort is tried first for a new embedded cluster; a free port is
// picked when it is taken.
const DefaultPort = 54329

// Database is the database studioctl creates and uses in the cluster.
const Database = "studio"

// rootDir is where root keeps the embedded cluster: the postgres user must
// reach it, which it cannot under /root.
const rootDir = "/var/lib/studioctl/embedded"

// DefaultDir is the embedded cluster's folder: $XDG_DATA_HOME/studioctl/embedded,
// ~/.local/share/studioctl/embedded, or for root /var/lib/studioctl/embedded.
func DefaultDir(getenv func(string) string) string {
	if x := getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "studioctl", "embedded")
	}
	if os.Geteuid() == 0 {
		return rootDir
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".local", "share", "studioctl", "embedded")
}

// Embedded is one embedded cluster folder: data/, port, lock.
type Embedded struct {
	Dir string
}

// Status describes the embedded cluster.
type Status struct {
	Dir         string `json:"dir" yaml:"dir"`
	Initialized bool   `json:"initialized" yaml:"initialized"`
	Running     bool   `json:"running" yaml:"running"`
	Port        int    `json:"port" yaml:"port"`
	URL         string `json:"url" yaml:"url"`
	BinDir      string `json:"bin_dir" yaml:"bin_dir"`
}

func (e *Embedded) dataDir() string  { return filepath.Join(e.Dir, "data") }
func (e *Embedded) portFile() string { return filepath.Join(e.Dir, "port") }

func (e *Embedded) port() (int, error) {
	b, err := os.ReadFile(e.portFile())
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func (e *Embedded) cluster() (*pgcluster.Cluster, error) {
	port, _ := e.port()
	return pgcluster.New(e.dataDir(), port, "UTC")
}

// URL is the connection string of the embedded database.
func URL(port int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", port, Database)
}

// lock takes an exclusive file lock on Dir/lock until the returned func runs.
func (e *Embedded) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(e.Dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded database: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded database: lock %s: %w", f.Name(), err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// Ensure initialises the cluster if needed, starts it if it is not running,
// creates the studio database and returns its URL. started says whether
// this call started the server.
func (e *Embedded) Ensure(ctx context.Context) (url string, started bool, err error) {
	c, err := e.cluster()
	if err != nil {
		return "", false, fmt.Errorf("embedded database: %w", err)
	}
	if err := c.PrepareParent(e.Dir); err != nil {
		return "", false, fmt.Errorf("embedded database: %w", err)
	}
	unlock, err := e.lock()
	if err != nil {
		return "", false, err
	}
	defer unlock()
	if !c.Initialized() {
		port := DefaultPort
		if !portFree(port) {
			if port, err = pgcluster.FreePort(); err != nil {
				return "", false, fmt.Errorf("embedded database: pick a port: %w", err)
			}
		}
		c.Port = port
		if err := c.Init(ctx); err != nil {
			return "", false, fmt.Errorf("embedded database: %w", err)
		}
		if err := os.WriteFile(e.portFile(), []byte(strconv.Itoa(port)+"\n"), 0o644); err != nil {
			return "", false, fmt.Errorf("embedded database: %w", err)
		}
	}
	if c.Port == 0 {
		return "", false, fmt.Errorf("embedded database: %s is missing: remove %s to start afresh", e.portFile(), e.Dir)
	}
	if !c.Running(ctx) {
		if err := c.Start(ctx); err != nil {
			return "", false, fmt.Errorf("embedded database: %w", err)
		}
		started = true
	}
	if err := createDatabase(ctx, c.URL("postgres")); err != nil {
		return "", started, fmt.Errorf("embedded database: %w", err)
	}
	return URL(c.Port), started, nil
}

func createDatabase(ctx context.Context, admin string) error {
	cfg, err := db.ParseConnConfig(admin)
	if err != nil {
		return err
	}
	conn, err := db.Connect(ctx, cfg, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, Database).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{Database}.Sanitize())
	return err
}

// Status reports on the cluster without starting it.
func (e *Embedded) Status(ctx context.Context) (Status, error) {
	s := Status{Dir: e.Dir}
	c, err := e.cluster()
	if err != nil {
		return s, fmt.Errorf("embedded database: %w", err)
	}
	s.BinDir = c.BinDir
	s.Initialized = c.Initialized()
	if s.Initialized {
		s.Port = c.Port
		s.URL = URL(c.Port)
		s.Running = c.Running(ctx)
	}
	return s, nil
}

// ErrNotRunning is returned by Stop when no server runs.
var ErrNotRunning = errors.New("embedded database is not running")

// Stop stops the server.
func (e *Embedded) Stop(ctx context.Context) error {
	c, err := e.cluster()
	if err != nil {
		return fmt.Errorf("embedded database: %w", err)
	}
	if !c.Initialized() || !c.Running(ctx) {
		return ErrNotRunning
	}
	unlock, err := e.lock()
	if err != nil {
		return err
	}
	defer unlock()
	return c.Stop(ctx)
}

func portFree(port int) bool {
	l, err := netListen(port)
	if err != nil {
		return false
	}
	l.Close()
	return true
}
