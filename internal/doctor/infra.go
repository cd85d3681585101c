package doctor

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/studioctl/studioctl/internal/db"
	"github.com/studioctl/studioctl/internal/liveness"
	"github.com/studioctl/studioctl/internal/migrate"
	"github.com/studioctl/studioctl/internal/replicas"
	"github.com/studioctl/studioctl/migrations"
)

// checkDatabase: reachable, and the server's version.
func checkDatabase(ctx context.Context, e *env) Result {
	if e.pool == nil {
		detail := "unreachable"
		if e.o.OpenErr != nil {
			detail += ": " + e.o.OpenErr.Error()
		}
		return Result{Status: Fail, Detail: detail,
			Hint: "check database.url (STUDIO_DATABASE_URL or the PG* variables), that the server runs, and that it accepts this host (pg_hba.conf); every other check is skipped"}
	}
	var version string
	var num int
	var standby, readOnly bool
	err := e.pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int,
  pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'`).Scan(&version, &num, &standby, &readOnly)
	if err != nil {
		return failed(fmt.Errorf("read the server version: %w", err))
	}
	switch {
	case num < MinServerVersionNum:
		return Result{Status: Fail, Detail: fmt.Sprintf("reachable; PostgreSQL %s is older than 13, which the schema needs", version),
			Hint: "upgrade the server to PostgreSQL 13 or later"}
	case standby:
		return Result{Status: Fail, Detail: fmt.Sprintf("reachable; PostgreSQL %s, but a standby in recovery: read-only, so replicas cannot run on it, and what doctor reads may lag", version),
			Hint: "point database.url at the primary"}
	case readOnly:
		return Result{Status: Fail, Detail: fmt.Sprintf("reachable; PostgreSQL %s, but sessions are read-only (default_transaction_read_only): replicas cannot register or take locks", version),
			Hint: "ALTER DATABASE ... SET default_transaction_read_only = off (or for the role), or point database.url at a writable database"}
	}
	return Result{Status: OK, Detail: "reachable; PostgreSQL " + version}
}

// checkSchema: pending migrations, or migrations this binary does not know.
func checkSchema(ctx context.Context, e *env) Result {
	err := migrate.CheckNotNewer(ctx, e.pool)
	var newer *migrate.NewerSchemaError
	if errors.As(err, &newer) {
		return Result{Status: Fail, Detail: err.Error(),
			Hint: "use a studioctl at least as new as the one that migrated the database; this one refuses to run a replica on it"}
	}
	if err != nil {
		return failed(err)
	}
	embedded, err := embeddedVersions()
	if err != nil {
		return failed(err)
	}
	applied, err := appliedVersions(ctx, e)
	if err != nil {
		return failed(err)
	}
	var pending []string
	for _, v := range embedded {
		if !applied[v] {
			pending = append(pending, fmt.Sprintf("%05d", v))
		}
	}
	latest := embedded[len(embedded)-1]
	if len(pending) > 0 {
		return Result{Status: Fail,
			Detail: fmt.Sprintf("%s pending: %s (this binary's latest is %05d)", plural(len(pending), "migration", "migrations"), strings.Join(pending, ", "), latest),
			Hint:   "run `studioctl migrate up` (a replica with database.migrate: on applies them when it starts)"}
	}
	return Result{Status: OK, Detail: fmt.Sprintf("every migration applied, up to %05d, the latest this binary knows", latest)}
}

// embeddedVersions are the migration versions this binary embeds, sorted.
func embeddedVersions() ([]int64, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list embedded migrations: %w", err)
	}
	var out []int64
	for _, n := range names {
		num, _, ok := strings.Cut(n, "_")
		if !ok {
			continue
		}
		if v, err := strconv.ParseInt(num, 10, 64); err == nil {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("list embedded migrations: none found")
	}
	slices.Sort(out)
	return out, nil
}

// appliedVersions reads goose's version table (none when it is absent),
// the latest row of each version deciding.
func appliedVersions(ctx context.Context, e *env) (map[int64]bool, error) {
	var exists bool
	if err := e.pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read migration versions: %w", err)
	}
	out := map[int64]bool{}
	if !exists {
		return out, nil
	}
	rows, err := e.pool.Query(ctx, `SELECT version_id FROM (
  SELECT DISTINCT ON (version_id) version_id, is_applied FROM goose_db_version ORDER BY version_id, id DESC
) v WHERE is_applied`)
	if err != nil {
		return nil, fmt.Errorf("read migration versions: %w", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read migration versions: %w", err)
	}
	for _, v := range vs {
		out[v] = true
	}
	return out, nil
}

// checkClock: this host's clock against the database's. The clock is read
// clockSamples times; the sample with the shortest round trip (measured
// on the monotonic clock) gives the offset: database time minus the
// midpoint of this host's readings before and after.
func checkClock(ctx context.Context, e *env) Result {
	var offset time.Duration
	best := time.Duration(-1)
	for range clockSamples {
		start := time.Now()
		t0 := e.o.Now()
		var dbTime time.Time
		if err := e.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&dbTime); err != nil {
			return failed(fmt.Errorf("read database time: %w", err))
		}
		t1 := e.o.Now()
		if rtt := time.Since(start); best < 0 || rtt < best {
			best = rtt
			offset = dbTime.Sub(t0.Add(t1.Sub(t0) / 2))
		}
	}
	abs := offset
	if abs < 0 {
		abs = -abs
	}
	var detail string
	switch {
	case abs < 50*time.Millisecond:
		detail = "this host's clock agrees with the database's (offset 0.0s)"
	case offset > 0:
		detail = fmt.Sprintf("this host's clock is %s behind the database's", formatOffset(abs))
	default:
		detail = fmt.Sprintf("this host's clock is %s ahead of the database's", formatOffset(abs))
	}
	fixed := ""
	if e.o.NowFixed {
		fixed = " (STUDIO_NOW fixes this host's clock)"
	}
	hint := "synchronise this host's clock (NTP: timedatectl, chronyc tracking); locks and schedules use database time, but this host's times and a replica's timers are off by the offset"
	others, skewed := replicaClocks(ctx, e)
	switch {
	case abs > ClockFailAbove:
		return Result{Status: Fail, Detail: detail + "; fail above 10s" + fixed + others, Hint: hint}
	case abs > ClockWarnAbove:
		return Result{Status: Warn, Detail: detail + "; warn above 1s" + fixed + others, Hint: hint}
	case skewed:
		return Result{Status: Warn, Detail: detail + fixed + others,
			Hint: "synchronise that replica's host clock (NTP); the replica corrects its timers by the offset it measures, but its logs and its host's other programs are off"}
	}
	return Result{Status: OK, Detail: detail + fixed + others}
}

// replicaClocksSQL lists the live replicas' clock offsets as their
// heartbeats measured them (database time minus the replica's clock),
// largest first.
var replicaClocksSQL = `SELECT r.id, r.clock_offset_seconds FROM studio_replica r
WHERE ` + liveness.LiveSQL("r") + ` AND r.clock_offset_seconds IS NOT NULL
ORDER BY abs(r.clock_offset_seconds) DESC, r.id`

// replicaClocks says how far the live replicas' clocks are from the
// database's (a detail suffix), and whether one is over ClockWarnAbove.
// Replicas correct their timers by their own offset, so a skewed replica
// warns and never fails. Without the table or the column (an older
// schema, which the schema check reports) it says nothing.
func replicaClocks(ctx context.Context, e *env) (string, bool) {
	if !e.tables["studio_replica"] {
		return "", false
	}
	rows, err := e.pool.Query(ctx, replicaClocksSQL)
	if err != nil {
		return "", false
	}
	type clock struct {
		id     string
		offset float64
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (clock, error) {
		var c clock
		err := r.Scan(&c.id, &c.offset)
		return c, err
	})
	if err != nil || len(cs) == 0 {
		return "", false
	}
	var skewed []string
	for _, c := range cs {
		d := time.Duration(c.offset * float64(time.Second))
		side := "behind"
		if d < 0 {
			d, side = -d, "ahead of"
		}
		if d > ClockWarnAbove {
			skewed = append(skewed, fmt.Sprintf("%s is %s %s the database", c.id, formatOffset(d), side))
		}
	}
	if len(skewed) > 0 {
		return "; replica clocks, as their heartbeats measure them: " + list(skewed) + "; warn above 1s", true
	}
	return fmt.Sprintf("; %s within 1s of it", plural(len(cs), "live replica's clock", "live replicas' clocks")), false
}

// formatOffset renders an offset to a tenth of a second under a minute.
func formatOffset(d time.Duration) string {
	if d = d.Round(100 * time.Millisecond); d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return ago(d)
}

// checkTLS: a host that is not this machine, reached without
// sslmode=verify-full, is open to a man in the middle.
func checkTLS(ctx context.Context, e *env) Result {
	cfg := e.o.ConnConfig
	if cfg == nil {
		return Result{Status: Skip, Detail: "not checked: no database configuration"}
	}
	targets := connTargets(cfg)
	// Whether this connection is encrypted, as the server sees it.
	inUse := ""
	if e.pool != nil {
		var ssl bool
		if err := e.pool.QueryRow(ctx, `SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)`).Scan(&ssl); err == nil {
			inUse = map[bool]string{true: "; this connection is encrypted", false: "; this connection is not encrypted"}[ssl]
		}
	}
	var exposed, local []string
	for _, t := range targets {
		name := t.String()
		switch {
		case isLocal(t.host):
			local = append(local, t.host) // the port says nothing here
		case t.mode != "verify-full":
			exposed = append(exposed, fmt.Sprintf("%s with sslmode=%s", name, t.mode))
		}
	}
	var r Result
	switch {
	case len(exposed) > 0:
		r = Result{Status: Warn,
			Detail: "not on this machine and reached without sslmode=verify-full: " + strings.Join(exposed, ", ") + inUse,
			Hint:   "set sslmode=verify-full (and sslrootcert) in database.url: without it a man in the middle can read the traffic and the password"}
	case len(local) == len(targets):
		r = Result{Status: OK, Detail: "on this machine (" + strings.Join(local, ", ") + "): TLS not needed" + inUse}
	default:
		r = Result{Status: OK, Detail: "every remote host is reached with sslmode=verify-full" + inUse}
	}
	if served := servedBeyondLoopback(ctx, e); len(served) > 0 {
		r.Status = Warn
		r.Detail += "; " + list(served) + ", without TLS or authentication"
		r.Hint = strings.TrimPrefix(r.Hint+"; "+hintServed, "; ")
	}
	return r
}

// hintServed is the tls check's hint for a replica that serves its page
// beyond loopback.
const hintServed = "set replica.listen to a loopback address (127.0.0.1:PORT) and reach the page through an SSH tunnel or an authenticating proxy, " +
	"unless everyone who reaches that address may read the installation's job names, errors, output and host names (docs/status-page.md)"

// servedBeyondLoopback names the live replicas whose recorded HTTP address
// (studio_replica.http_addr: the address their listener took for
// replica.listen) is not loopback (issue 21, finding 8). Nothing when the
// database or its table cannot be read: other checks say so.
func servedBeyondLoopback(ctx context.Context, e *env) []string {
	if e.pool == nil {
		return nil
	}
	infos, err := replicas.List(ctx, e.pool)
	if err != nil {
		return nil
	}
	var out []string
	for _, in := range infos {
		if !in.Live {
			continue
		}
		switch where := replicas.Exposure(in.HTTPAddr); where {
		case "":
		case "every interface":
			out = append(out, fmt.Sprintf("%s serves its page and event stream on every interface (%s)", in.ID, in.HTTPAddr))
		default:
			out = append(out, fmt.Sprintf("%s serves its page and event stream beyond loopback (%s)", in.ID, in.HTTPAddr))
		}
	}
	return out
}

type target struct {
	host string
	port uint16
	mode string
}

func (t target) String() string {
	return net.JoinHostPort(t.host, strconv.Itoa(int(t.port)))
}

// connTargets are the hosts pgx tries, in order, each with the sslmode
// its attempts amount to: the first attempt at a host and the one after it
// (a plain retry after TLS is prefer, a TLS retry after plain is allow).
func connTargets(cfg *pgx.ConnConfig) []target {
	type attempt struct {
		host string
		port uint16
		tls  *tls.Config
	}
	attempts := []attempt{{cfg.Host, cfg.Port, cfg.TLSConfig}}
	for _, f := range cfg.Fallbacks {
		attempts = append(attempts, attempt{f.Host, f.Port, f.TLSConfig})
	}
	var out []target
	seen := map[string]bool{}
	for i, a := range attempts {
		key := net.JoinHostPort(a.host, strconv.Itoa(int(a.port)))
		if seen[key] {
			continue
		}
		seen[key] = true
		retry := ""
		for _, b := range attempts[i+1:] {
			if b.host == a.host && b.port == a.port {
				retry = map[bool]string{true: "plain", false: "tls"}[b.tls == nil]
				break
			}
		}
		t := a.tls
		out = append(out, target{host: a.host, port: a.port,
			mode: sslMode(t != nil, t != nil && t.InsecureSkipVerify, t != nil && t.VerifyPeerCertificate != nil, retry)})
	}
	return out
}

// sslMode names the sslmode pgx's parsed configuration amounts to:
// disable (no TLS), allow (plain first, then TLS), prefer (TLS first,
// then plain), require (TLS, no certificate check), verify-ca (the
// certificate, not the host name), verify-full (both).
func sslMode(tls, insecure, verifyPeer bool, fallback string) string {
	switch {
	case !tls && fallback == "tls":
		return "allow"
	case !tls:
		return "disable"
	case fallback == "plain":
		return "prefer"
	case insecure && verifyPeer:
		return "verify-ca"
	case insecure:
		return "require"
	default:
		return "verify-full"
	}
}

// isLocal: a Unix socket, localhost, or a loopback address.
func isLocal(host string) bool {
	if strings.HasPrefix(host, "/") || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listenConn opens a connection of its own, as a replica's bus listener
// does (from the configuration; from the pool without one), and listens
// on channel, within BusTimeout.
func listenConn(ctx context.Context, e *env, channel string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, BusTimeout)
	defer cancel()
	var conn *pgx.Conn
	if e.o.ListenConnConfig != nil {
		c, err := db.Connect(ctx, e.o.ListenConnConfig.Copy(), "")
		if err != nil {
			return nil, err
		}
		conn = c
	} else if e.o.ConnConfig != nil {
		c, err := db.Connect(ctx, e.o.ConnConfig.Copy(), "")
		if err != nil {
			return nil, err
		}
		conn = c
	} else {
		pc, err := e.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		conn = pc.Hijack() // closed afterwards, not returned to the pool listening
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

// closeConn closes the listening connection, waiting at most a second for
// the goodbye (the network may be what failed).
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Close(ctx)
}

// checkBus: a NOTIFY from one connection reaches a LISTEN on another, on a
// temporary channel of its own (so no replica sees it), as the bus's
// signals must (docs/bus.md).
func checkBus(ctx context.Context, e *env) Result {
	hint := "replicas would not hear drains, triggers and lease signals in time: a pooler in transaction mode (PgBouncer) drops LISTEN; give the bus a direct connection with database.listen_url (docs/poolers.md), or use session mode"
	b := make([]byte, 8)
	rand.Read(b)
	channel := "studio_doctor_" + hex.EncodeToString(b)
	conn, err := listenConn(ctx, e, channel)
	if err != nil {
		return Result{Status: Fail, Detail: "LISTEN failed: " + err.Error(), Hint: hint}
	}
	defer closeConn(conn)
	if e.o.afterListen != nil {
		e.o.afterListen()
	}
	start := time.Now()
	nctx, cancel := context.WithTimeout(ctx, BusTimeout)
	_, err = e.pool.Exec(nctx, `SELECT pg_catalog.pg_notify($1, 'doctor')`, channel)
	cancel()
	if err != nil {
		return Result{Status: Fail, Detail: "NOTIFY failed: " + err.Error(), Hint: hint}
	}
	wctx, cancel := context.WithTimeout(ctx, BusTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil && e.o.ListenConnConfig != nil {
			// The LISTEN is on database.listen_url: a session of its own
			// (the pooler check says whether it is).
			return Result{Status: Fail, Detail: fmt.Sprintf("a NOTIFY sent through database.url did not reach a LISTEN on database.listen_url "+
				"within %s", BusTimeout), Hint: "database.listen_url must reach the same PostgreSQL database as database.url, or replicas " +
				"would not hear drains, triggers and lease signals (docs/poolers.md)"}
		}
		if err != nil {
			return Result{Status: Fail, Detail: fmt.Sprintf("a NOTIFY on a temporary channel did not reach its LISTEN on another connection within %s", BusTimeout), Hint: hint}
		}
		if n.Channel != channel {
			continue
		}
		if rtt := time.Since(start); rtt > BusWarnAbove {
			return Result{Status: Warn, Detail: fmt.Sprintf("a NOTIFY on a temporary channel took %s to reach its LISTEN; warn above 1s", rtt.Round(time.Millisecond)), Hint: hint}
		}
		return Result{Status: OK, Detail: "a NOTIFY on a temporary channel reached its LISTEN on another connection within 1s"}
	}
}
