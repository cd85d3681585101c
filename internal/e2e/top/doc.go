// Package e2etop drives `studioctl top` as an operator does: the real
// binary in a real terminal (tmux, 80x24) against real replicas and a real
// PostgreSQL, keys sent with send-keys and the screen read with
// capture-pane. It has only tests; see docs/top.md.
package e2etop
