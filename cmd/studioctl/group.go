package main

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// groupCmd is a noun that only holds verbs: without a verb it prints help,
// with an unknown one it is a usage error.
func groupCmd(use, short, long string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  groupArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
}

// groupArgs refuses a verb the noun does not have, as a usage error that
// suggests the closest ones (cobra's suggestions: a name within two edits,
// or one the typed one begins).
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only on its own path
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		return usageErrorf("unknown command %q for %q; did you mean %s? (see %s --help)", args[0], cmd.CommandPath(), quotedOr(s), cmd.CommandPath())
	}
	return usageErrorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
}

// quotedOr is "a", "a" or "b", "a", "b" or "c".
func quotedOr(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}
