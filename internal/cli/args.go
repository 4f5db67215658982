package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// parseFlags parses a command's flags; a negative code means go on.
func parseFlags(fs *flag.FlagSet, args []string, env cliEnv) int {
	fs.SetOutput(env.stderr)
	return flagsExit(fs.Parse(args))
}

// parseArgs parses a command's flags and returns its arguments: flags may
// come before, between and after them.
func parseArgs(fs *flag.FlagSet, args []string, env cliEnv) ([]string, int) {
	if code := parseFlags(fs, args, env); code >= 0 {
		return nil, code
	}
	pos, err := positionals(fs, args)
	return pos, flagsExit(err)
}

// positionals returns the arguments left after fs parsed args, parsing
// the flags after each of them too (the flag package stops at the first
// argument). "--" ends the flags: what follows it is all arguments.
func positionals(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for rest := fs.Args(); len(rest) > 0; rest = fs.Args() {
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
	}
	return pos, nil
}

// flagsExit is the exit code of a flag parsing error (-1 for none): the
// flag package has printed it, or the usage for -h.
func flagsExit(err error) int {
	switch {
	case err == nil:
		return -1
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	}
	return ExitUsage
}

// parseNoArgs parses the flags of a command that takes no argument, and
// refuses one (noArgs).
func parseNoArgs(fs *flag.FlagSet, args []string, env cliEnv) int {
	if code := parseFlags(fs, args, env); code >= 0 {
		return code
	}
	return noArgs(fs, fs.Args(), env.stderr)
}

// noArgs refuses the arguments (args) of a command that takes flags only:
// the flag package stops at the first argument, so the flags after it
// would be ignored without a word. A negative code means go on.
func noArgs(fs *flag.FlagSet, args []string, w io.Writer) int {
	if len(args) == 0 {
		return -1
	}
	arg := args[0]
	hint := ""
	if fs.Lookup("queue") != nil && !strings.HasPrefix(arg, "-") {
		hint = fmt.Sprintf(" (a queue is --queue %s)", arg)
	}
	fmt.Fprintf(w, "%s: unexpected argument %q: %s takes flags only%s; see %s -h\n", fs.Name(), arg, fs.Name(), hint, fs.Name())
	return ExitUsage
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// timeArg reads a time flag: RFC 3339, or a duration meaning that long ago
// ("24h", "90m").
func timeArg(name, s string, now time.Time) (string, error) {
	if s == "" {
		return "", nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d).UTC().Format(time.RFC3339), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC().Format(time.RFC3339), nil
	}
	return "", fmt.Errorf("--%s %q: use an RFC 3339 time (2024-05-01T12:00:00Z) or a duration ago (24h)", name, s)
}
