// Command studioctl hosts a replica (`studioctl run`) and is the operator's
// tool for the tables replicas share (SPEC §9).
package main

import "os"

func main() { os.Exit(Main()) }
