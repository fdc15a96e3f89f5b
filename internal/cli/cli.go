// Package cli holds the flag handling bootd and imgbuild share: help text with the flags after
// it, and flags allowed before or after the positional arguments.
package cli

import (
	"flag"
	"fmt"
)

// NewFlagSet returns a flag set whose usage prints help, then the flags. Errors are returned,
// not fatal, so each command decides its exit status.
func NewFlagSet(name, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help)
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// ParseInterleaved parses flags that may come before or after positional arguments
// ("assign c4 --mac X" as well as "assign --mac X c4"), which the flag package alone does not,
// and returns the positional arguments.
func ParseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if args = fs.Args(); len(args) == 0 {
			return positional, nil
		}
		positional, args = append(positional, args[0]), args[1:]
	}
}
