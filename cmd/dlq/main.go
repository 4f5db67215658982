package main

import (
	"fmt"
	"os"

	"github.com/dlq/dlq/internal/cli"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return cli.ExitUsage
	}
	name, rest := args[0], args[1:]
	for _, c := range commands() {
		if c.name == name {
			return c.run(rest)
		}
	}
	switch name {
	case "help", "-h", "--help":
		usage(os.Stdout)
		return cli.ExitOK
	case "--version", "-version":
		return cmdVersion(rest)
	}
	fmt.Fprintf(os.Stderr, "dlq: unknown command %q\n\n", name)
	usage(os.Stderr)
	return cli.ExitUsage
}
