package locks

// HolderSQL is a scalar subquery over table t: the locked_by of the lock
// whose name is the SQL expression nameExpr (NULL when there is no row).
// The run store uses it to name the holder of a lock a tick found held
// (skipped/held-elsewhere, docs/occurrences.md), in the statement that
// writes the skip, so a skip costs no statement of its own. t is valid.
func (t Table) HolderSQL(nameExpr string) string {
	return "(SELECT l." + col(t.LockedBy) + " FROM " + t.ident() + " l WHERE l." + col(t.NameCol) + " = " + nameExpr + " LIMIT 1)"
}
