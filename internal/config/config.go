// Package config builds studioctl's configuration for one invocation
// (SPEC §10): flags > STUDIO_* environment > config file > defaults.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"gopkg.in/yaml.v3"
)

// EnvPrefix is prepended to every config key, with "." turned into "_":
// database.url -> STUDIO_DATABASE_URL.
const EnvPrefix = "STUDIO"

// Keys and their defaults. Every key can be set in the file, as STUDIO_<KEY>,
// and some by flags.
var defaults = map[string]any{
	"database.url":               "",
	"database.listen_url":        "",
	"database.sql_url":           "",
	"database.sql_as_replica":    false,
	"database.migrate":           "on",
	"database.max_conns":         DefaultMaxConns,
	"output":                     "table",
	"no_color":                   false,
	"actor":                      "",
	"replica.id":                 "",
	"replica.listen":             "127.0.0.1:0",
	"drain.delay":                "5s",
	"locks.table":                "shedlock",
	"locks.columns.name":         "name",
	"locks.columns.lock_until":   "lock_until",
	"locks.columns.locked_at":    "locked_at",
	"locks.columns.locked_by":    "locked_by",
	"embedded.dir":               "",
	"metrics.per_job":            "auto",
	"metrics.per_job_limit":      DefaultPerJobLimit,
	"runner.max_concurrent_runs": DefaultMaxConcurrentRuns,
	"runner.durable_starts":      true,
	"leases.max_config_clusters": DefaultMaxConfigClusters,
}

// Keys lists every configuration key, sorted.
func Keys() []string {
	keys := make([]string, 0, len(defaults))
	for k := range defaults {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// EnvName is the environment variable for key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.NewReplacer(".", "_").Replace(key))
}

// Config is the decoded configuration.
type Config struct {
	Database struct {
		URL string `mapstructure:"url"`
		// ListenURL is a direct connection for the bus, the heartbeat and
		// the migrations when URL goes through a pooler in transaction
		// mode (docs/poolers.md); "" means URL.
		ListenURL string `mapstructure:"listen_url"`
		// SQLURL is the connection sql: jobs run on, as a role of their
		// own (docs/jobs-sql.md); "" means the replica's own.
		SQLURL string `mapstructure:"sql_url"`
		// SQLAsReplica lets sql: jobs run as the replica's own role when
		// SQLURL is unset, on a database other than the embedded default
		// (docs/jobs-sql.md); without it, run refuses such a config. Load
		// reads it.
		SQLAsReplica bool   `mapstructure:"-"`
		Migrate      string `mapstructure:"migrate"`
		// MaxConns is the replica's pool size (docs/connections.md); Load
		// reads and bounds it.
		MaxConns int `mapstructure:"-"`
	} `mapstructure:"database"`
	Output  string `mapstructure:"output"`
	NoColor bool   `mapstructure:"no_color"`
	Actor   string `mapstructure:"actor"`
	Replica struct {
		ID     string `mapstructure:"id"`
		Listen string `mapstructure:"listen"`
	} `mapstructure:"replica"`
	Drain struct {
		// Delay is read by Load with ParseDuration (mapstructure would take
		// a bare 5 as 5ns); 0 means no delay.
		Delay time.Duration `mapstructure:"-"`
	} `mapstructure:"drain"`
	Locks struct {
		Table   string `mapstructure:"table"`
		Columns struct {
			Name      string `mapstructure:"name"`
			LockUntil string `mapstructure:"lock_until"`
			LockedAt  string `mapstructure:"locked_at"`
			LockedBy  string `mapstructure:"locked_by"`
		} `mapstructure:"columns"`
	} `mapstructure:"locks"`
	Embedded struct {
		Dir string `mapstructure:"dir"`
	} `mapstructure:"embedded"`
	// Metrics chooses the runner's per-job Prometheus series
	// (docs/metrics.md); Load reads and checks both.
	Metrics struct {
		PerJob      string `mapstructure:"-"` // auto, on or off
		PerJobLimit int    `mapstructure:"-"` // auto: per-job series up to this many jobs
	} `mapstructure:"metrics"`

	// Runner bounds the job runner (docs/jobs-processes.md, "How many runs
	// at once"); Load reads and bounds it.
	Runner struct {
		MaxConcurrentRuns int `mapstructure:"-"`
		// DurableStarts: a run's row is written before its task starts
		// (docs/history.md, "A run's row is written before it starts").
		DurableStarts bool `mapstructure:"-"`
	} `mapstructure:"runner"`
	// Leases bounds the configuration's clusters: list (docs/leases.md).
	Leases struct {
		MaxConfigClusters int `mapstructure:"-"`
	} `mapstructure:"leases"`

	// File is the config file read, if any.
	File string `mapstructure:"-"`
	// Doc is that file as read, once: its parsed YAML, whose sections
	// (jobs:, clusters:) their own parsers take, so no one reads the file
	// again. nil without a file.
	Doc *Document `mapstructure:"-"`
}

// Document is the config file as Load read it: its path and its YAML
// tree, with the line of every node, so an error found in any section
// names the one file and its line.
type Document struct {
	Path string
	root *yaml.Node // the top-level mapping; nil for an empty document
}

// Section is the value of top-level key in the file (jobs, clusters), or
// nil when the file has none. Safe on a nil Document.
func (d *Document) Section(key string) *yaml.Node {
	if d == nil || d.root == nil || d.root.Kind != yaml.MappingNode {
		return nil
	}
	var v *yaml.Node
	for i := 0; i+1 < len(d.root.Content); i += 2 {
		if d.root.Content[i].Value == key {
			v = d.root.Content[i+1] // the last one wins, as in viper
		}
	}
	return v
}

// MaxDrainDelay bounds drain.delay: a load balancer notices a failing
// readiness within seconds, and a supervisor kills a replica that takes
// much longer to stop.
const MaxDrainDelay = 10 * time.Minute

// The bounds of database.max_conns, the replica's pool size: the run store,
// the runner's lock calls, control requests and reads share it, so fewer
// than 2 would serialise them behind one another; more than 1,000 is no
// pool PostgreSQL serves well (docs/connections.md).
const (
	DefaultMaxConns = 8
	MinMaxConns     = 2
	MaxMaxConns     = 1000
)

// metrics.per_job_limit: per-job series up to 1,000 jobs by default (about
// 15,000 series, a 1 MB scrape once every job has run); the maximum is only
// a sanity bound (docs/metrics.md).
const (
	DefaultPerJobLimit = 1000
	MaxPerJobLimit     = 1_000_000
)

// runner.max_concurrent_runs: the most runs a replica has in progress at
// once (runner.DefaultMaxConcurrentRuns, which a test keeps equal: config
// does not import the runner). Four per core of a 2-core host; the maximum
// is a sanity bound.
const (
	DefaultMaxConcurrentRuns = 8
	MaxMaxConcurrentRuns     = 100_000
)

// leases.max_config_clusters: the most clusters one configuration's
// clusters: list may name; more are added with leases add.
const (
	DefaultMaxConfigClusters = 1000
	MaxMaxConfigClusters     = 1_000_000
)

// PerJobModes are the values of metrics.per_job.
var PerJobModes = []string{"auto", "on", "off"}

// Choice reads key's value, one of allowed, from its raw value (YAML's on
// and off may arrive as booleans). Errors name the key and its environment
// variable.
func Choice(key string, raw any, allowed []string) (string, error) {
	var s string
	switch x := raw.(type) {
	case string:
		s = strings.TrimSpace(x)
	case bool:
		s = map[bool]string{true: "on", false: "off"}[x]
	default:
		s = fmt.Sprint(raw)
	}
	for _, a := range allowed {
		if s == a {
			return s, nil
		}
	}
	want := strings.Join(allowed[:len(allowed)-1], ", ") + " or " + allowed[len(allowed)-1]
	return "", &Error{Msg: fmt.Sprintf("%s (%s): %q: want %s", key, EnvName(key), s, want)}
}

// Bool reads the boolean of key from its raw value: a YAML boolean, or
// true, false, 1, 0, on or off as a string (the environment). Errors name
// the key and its environment variable.
func Bool(key string, raw any) (bool, error) {
	switch x := raw.(type) {
	case bool:
		return x, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true", "1", "on", "yes":
			return true, nil
		case "false", "0", "off", "no", "":
			return false, nil
		}
	}
	return false, &Error{Msg: fmt.Sprintf("%s (%s): %q: want true or false", key, EnvName(key), fmt.Sprint(raw))}
}

// Int reads the integer of key from its raw value (a string from the
// environment or the file, or a YAML number) within [lo, hi]. Errors name
// the key and its environment variable.
func Int(key string, raw any, lo, hi int) (int, error) {
	bad := func(format string, args ...any) error {
		return &Error{Msg: fmt.Sprintf("%s (%s): ", key, EnvName(key)) + fmt.Sprintf(format, args...)}
	}
	var n int
	switch x := raw.(type) {
	case int:
		n = x
	case int64:
		n = int(x)
	case uint64:
		n = int(x)
	case string:
		v, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil {
			return 0, bad("%q is not a whole number", x)
		}
		n = v
	default:
		return 0, bad("%v is not a whole number", raw)
	}
	if n < lo || n > hi {
		return 0, bad("%d is out of range: want %d to %d", n, lo, hi)
	}
	return n, nil
}

// Duration reads the duration of key from its raw value (a string from the
// environment or the file, or a YAML number). It needs a unit ("5s",
// "500ms"; a bare 0 is allowed, it means the same in every unit) and must
// lie within [lo, hi]. Errors name the key and its environment variable.
func Duration(key string, raw any, lo, hi time.Duration) (time.Duration, error) {
	bad := func(format string, args ...any) error {
		return &Error{Msg: fmt.Sprintf("%s (%s): ", key, EnvName(key)) + fmt.Sprintf(format, args...)}
	}
	var s string
	switch x := raw.(type) {
	case nil:
		return 0, bad("is empty; want a duration with a unit, for example 5s")
	case string:
		s = strings.TrimSpace(x)
	case time.Duration:
		s = x.String()
	case int, int64, uint64, float64:
		s = fmt.Sprint(x)
	default:
		return 0, bad("%v is not a duration; want a number with a unit, for example 5s", raw)
	}
	d, err := ParseDuration(s)
	if err != nil {
		return 0, bad("%s", err)
	}
	if d < lo {
		if lo == 0 {
			return 0, bad("%s is negative", s)
		}
		return 0, bad("%s is shorter than the minimum %s", s, lo)
	}
	if d > hi {
		return 0, bad("%s is longer than the maximum %s", s, hi)
	}
	return d, nil
}

// ParseDuration is time.ParseDuration that refuses a number without a unit
// ("5" would be 5ns to mapstructure, an error to time.ParseDuration) with a
// message that says so. "0" alone is zero.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("is empty; want a duration with a unit, for example 5s")
	}
	if strings.Trim(s, "+-0123456789.") == "" && strings.Trim(s, "+-0.") != "" {
		return 0, fmt.Errorf("%q has no unit; write for example %ss or %sms", s, s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; want a number with a unit (ns, us, ms, s, m, h), for example 5s", s)
	}
	return d, nil
}

// Error is a configuration error (exit code 2).
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

// FlagBinding ties a flag to a key.
type FlagBinding struct {
	Key  string
	Flag *pflag.Flag
}

// Load builds a viper for this invocation and decodes it. file is --config
// ("" to search ./studio.yaml and $XDG_CONFIG_HOME/studioctl/config.yaml).
// The file is read once: viper is fed its bytes, and Config.Doc keeps its
// YAML tree for the jobs: and clusters: parsers.
func Load(file string, getenv func(string) string, flags []FlagBinding) (*Config, *viper.Viper, error) {
	return LoadFrom(os.ReadFile, file, getenv, flags)
}

// LoadFrom is Load with the file read through readFile, called once at
// most.
func LoadFrom(readFile func(string) ([]byte, error), file string, getenv func(string) string, flags []FlagBinding) (*Config, *viper.Viper, error) {
	v := viper.New()
	for k, d := range defaults {
		v.SetDefault(k, d)
	}
	for _, b := range flags {
		if err := v.BindPFlag(b.Key, b.Flag); err != nil {
			return nil, nil, err
		}
	}
	// The environment is read through getenv only (viper's own env binding
	// would read the process's): a STUDIO_* value overrides the file and
	// the defaults, and a flag given on the command line overrides it.
	changed := map[string]bool{}
	for _, b := range flags {
		if b.Flag != nil && b.Flag.Changed {
			changed[b.Key] = true
		}
	}
	envSet := map[string]string{}
	for k := range defaults {
		if val := getenv(EnvName(k)); val != "" && !changed[k] {
			envSet[k] = val
		}
	}
	path, err := findFile(file, getenv)
	if err != nil {
		return nil, nil, err
	}
	var doc *Document
	if path != "" {
		// The file's syntax first: viper's message names the line where
		// the enclosing block began, not the bad one.
		b, err := readFile(path)
		if err != nil {
			return nil, nil, &Error{Msg: fmt.Sprintf("config file %s: %v", path, err)}
		}
		if doc, err = parseDocument(path, b); err != nil {
			return nil, nil, err
		}
		v.SetConfigType("yaml")
		if err := v.ReadConfig(bytes.NewReader(b)); err != nil {
			return nil, nil, &Error{Msg: fmt.Sprintf("config file %s: %v", path, err)}
		}
		if err := checkKeys(path, v.AllSettings(), ""); err != nil {
			return nil, nil, err
		}
	}
	for k, val := range envSet {
		v.Set(k, val)
	}
	var c Config
	if err := v.Unmarshal(&c); err != nil {
		return nil, nil, &Error{Msg: fmt.Sprintf("configuration: %v", err)}
	}
	c.File = path
	c.Doc = doc
	// Neither libpq nor pgx takes " postgres://..." as a URL; white space
	// around a pasted URL is never meant.
	c.Database.URL = strings.TrimSpace(c.Database.URL)
	c.Database.ListenURL = strings.TrimSpace(c.Database.ListenURL)
	c.Database.SQLURL = strings.TrimSpace(c.Database.SQLURL)
	if c.Drain.Delay, err = Duration("drain.delay", v.Get("drain.delay"), 0, MaxDrainDelay); err != nil {
		return nil, nil, err
	}
	if c.Database.MaxConns, err = Int("database.max_conns", v.Get("database.max_conns"), MinMaxConns, MaxMaxConns); err != nil {
		return nil, nil, err
	}
	if c.Metrics.PerJob, err = Choice("metrics.per_job", v.Get("metrics.per_job"), PerJobModes); err != nil {
		return nil, nil, err
	}
	if c.Metrics.PerJobLimit, err = Int("metrics.per_job_limit", v.Get("metrics.per_job_limit"), 1, MaxPerJobLimit); err != nil {
		return nil, nil, err
	}
	if c.Runner.MaxConcurrentRuns, err = Int("runner.max_concurrent_runs", v.Get("runner.max_concurrent_runs"), 1, MaxMaxConcurrentRuns); err != nil {
		return nil, nil, err
	}
	if c.Leases.MaxConfigClusters, err = Int("leases.max_config_clusters", v.Get("leases.max_config_clusters"), 1, MaxMaxConfigClusters); err != nil {
		return nil, nil, err
	}
	if c.Database.SQLAsReplica, err = Bool("database.sql_as_replica", v.Get("database.sql_as_replica")); err != nil {
		return nil, nil, err
	}
	if c.Runner.DurableStarts, err = Bool("runner.durable_starts", v.Get("runner.durable_starts")); err != nil {
		return nil, nil, err
	}
	if c.Database.Migrate != "on" && c.Database.Migrate != "off" {
		return nil, nil, &Error{Msg: fmt.Sprintf("database.migrate: %q: want on or off", c.Database.Migrate)}
	}
	return &c, v, nil
}

// nested lists keys that hold free-form maps or lists (checked by their owners).
var nested = map[string]bool{"jobs": true, "clusters": true}

// checkKeys rejects keys that studioctl does not know, naming the file.
func checkKeys(path string, m map[string]any, prefix string) error {
	for k, val := range m {
		key := prefix + k
		if nested[key] {
			continue
		}
		if sub, ok := val.(map[string]any); ok {
			if err := checkKeys(path, sub, key+"."); err != nil {
				return err
			}
			continue
		}
		if _, ok := defaults[key]; !ok {
			return &Error{Msg: fmt.Sprintf("config file %s: unknown key %q", path, key)}
		}
	}
	return nil
}

func findFile(file string, getenv func(string) string) (string, error) {
	if file != "" {
		if _, err := os.Stat(file); err != nil {
			return "", &Error{Msg: fmt.Sprintf("--config: %v", err)}
		}
		return file, nil
	}
	candidates := []string{"studio.yaml"}
	xdg := getenv("XDG_CONFIG_HOME")
	if xdg == "" {
		if home := getenv("HOME"); home != "" {
			xdg = filepath.Join(home, ".config")
		}
	}
	if xdg != "" {
		candidates = append(candidates, filepath.Join(xdg, "studioctl", "config.yaml"))
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", &Error{Msg: fmt.Sprintf("config file %s: %v", c, err)}
		}
	}
	return "", nil
}
