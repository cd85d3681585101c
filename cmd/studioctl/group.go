package main

import "github.com/spf13/cobra"

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

// groupArgs refuses a verb the noun does not have, as a usage error.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unknown command %q for %q (see %s --help)", args[0], cmd.CommandPath(), cmd.CommandPath())
	}
	return nil
}
