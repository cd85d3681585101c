package jobstore

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The flush's array parameters. pgx encodes a []string, []int64 or
// []time.Time by boxing each element into an interface, one allocation per
// element: at 10,000 jobs, about 30 per run, half of the process's
// allocations (docs/cost.md). A pgArray hands pgx a pointer to each element
// instead (an interface holds a pointer without allocating), and the
// element types give pgx their value through its Valuer interfaces. The
// bytes sent are the same binary arrays.
type pgArray[E any] []E

func (a pgArray[E]) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

func (a pgArray[E]) Index(i int) any { return &a[i] }
func (a pgArray[E]) IndexType() any  { return new(E) }

// pgText is a text element.
type pgText string

func (t *pgText) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*t), Valid: true}, nil
}

// pgInt8 is a bigint element.
type pgInt8 int64

func (n *pgInt8) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*n), Valid: true}, nil
}

// pgBool is a boolean element.
type pgBool bool

func (b *pgBool) BoolValue() (pgtype.Bool, error) {
	return pgtype.Bool{Bool: bool(*b), Valid: true}, nil
}

// pgTime is a timestamptz element; NULL when null.
type pgTime struct {
	t    time.Time
	null bool
}

func (t *pgTime) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: t.t, Valid: !t.null}, nil
}

// pgTimeOf is the element of an optional time (nil: NULL).
func pgTimeOf(t *time.Time) pgTime {
	if t == nil {
		return pgTime{null: true}
	}
	return pgTime{t: *t}
}

// plain is a as the slice pgx knows by its Go type ([]string, []int64,
// []bool, []pgtype.Timestamptz). In pgx's exec mode, which a pool behind
// a pooler in transaction mode uses (db.ForPooler, docs/poolers.md), pgx
// picks each parameter's type from its Go type, and a pgArray has none it
// knows: "unable to encode ... into text format for unknown type (OID
// 0)". That mode pays an allocation per element again.
func (a pgArray[E]) plain() any {
	switch v := any(a).(type) {
	case pgArray[pgText]:
		out := make([]string, len(v))
		for i, x := range v {
			out[i] = string(x)
		}
		return out
	case pgArray[pgInt8]:
		out := make([]int64, len(v))
		for i, x := range v {
			out[i] = int64(x)
		}
		return out
	case pgArray[pgBool]:
		out := make([]bool, len(v))
		for i, x := range v {
			out[i] = bool(x)
		}
		return out
	case pgArray[pgTime]:
		out := make([]pgtype.Timestamptz, len(v))
		for i, x := range v {
			out[i] = pgtype.Timestamptz{Time: x.t, Valid: !x.null}
		}
		return out
	}
	return a
}

// plainArgs replaces every pgArray of args by its plain slice, in place.
func plainArgs(args []any) []any {
	for i, a := range args {
		if p, ok := a.(interface{ plain() any }); ok {
			args[i] = p.plain()
		}
	}
	return args
}

// execMode reports whether q sends its statements in pgx's exec mode (its
// pool's configuration says so): the flush then gives pgx plain slices.
func execMode(q any) bool {
	c, ok := q.(interface{ Config() *pgxpool.Config })
	return ok && c.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeExec
}
