package locks

// TableSQL is the quoted, resolved table name for SQL, for the tests' own
// statements on a configured table.
func TableSQL(t Table) string { return t.ident() }

// ColumnSQL is a configured column name, resolved and quoted for SQL.
func ColumnSQL(raw string) string { return col(raw) }
