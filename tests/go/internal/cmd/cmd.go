// Package cmd runs one command of a test program: the command named by the first argument gets
// the rest, and what it returns is printed as one JSON object on stdout (its error on stderr,
// exit status 1).
package cmd

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
)

// Run runs os.Args' command from commands.
func Run(program string, commands map[string]func(args []string) (any, error)) {
	if len(os.Args) < 2 {
		fmt.Fprintf(os.Stderr, "%s: no command\n", program)
		os.Exit(2)
	}
	run, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: unknown command %q\n", program, os.Args[1])
		os.Exit(2)
	}
	out, err := run(os.Args[2:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		panic(err)
	}
}

// Atoi is strconv.Atoi for arguments the test passes: a bad one is a bug in the test.
func Atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}
