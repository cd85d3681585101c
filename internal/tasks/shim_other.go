//go:build !linux

package tasks

import (
	"fmt"
	"os"
)

// ShimMain exists on Linux only: elsewhere Run starts commands directly.
func ShimMain() int {
	fmt.Fprintf(os.Stderr, "studioctl: %s is internal and exists on Linux only\n", shimArg)
	return 2
}
