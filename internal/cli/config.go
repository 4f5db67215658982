package cli

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/dlq/dlq/config"
)

// configCommands are the subcommands that read the configuration: the
// configuration flags each one takes besides --config (those it uses),
// and whether it takes arguments besides flags.
var configCommands = map[string]struct {
	flags []string
	args  bool
}{
	"serve":    {flags: []string{"amqp-url", "database-url", "http-addr", "no-migrate"}},
	"migrate":  {flags: []string{"database-url"}},
	"rekey":    {flags: []string{"database-url", "no-migrate"}},
	"topology": {flags: []string{"amqp-url"}},
	"replay":   {flags: []string{"amqp-url"}, args: true},
	"replays":  {flags: []string{"amqp-url"}, args: true},
	"cancel":   {flags: []string{"amqp-url"}, args: true},
}

// LoadConfig parses a subcommand's flags (the configuration's it uses, and
// those extra registers) and loads the configuration, for the subcommands
// that read it: serve, migrate, rekey and topology, and the replay
// commands. It returns the arguments besides flags (flags may come before,
// between and after them), and refuses any for a command that takes none.
// The code is negative when the subcommand goes on; otherwise it is the
// exit code (ExitOK after -h, ExitUsage for a bad flag, argument or
// configuration).
func LoadConfig(name string, args []string, extra func(*flag.FlagSet)) (config.Config, *slog.Logger, []string, int) {
	fs := flag.NewFlagSet("dlq "+name, flag.ContinueOnError)
	var f config.Flags
	cmd, known := configCommands[name]
	registerConfigFlags(fs, &f, cmd.flags, known)
	if extra != nil {
		extra(fs)
	}
	pos, code := parseConfigFlags(name, fs, args)
	if code >= 0 {
		return config.Config{}, nil, nil, code
	}
	if known && !cmd.args {
		if code := noArgs(fs, pos, os.Stderr); code >= 0 {
			return config.Config{}, nil, nil, code
		}
	}
	cfg, err := config.Load(f, os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq %s: %v\n", name, err)
		return config.Config{}, nil, nil, ExitUsage
	}
	return cfg, newLogger(cfg.Log), pos, -1
}

// registerConfigFlags registers --config and, of the other configuration
// flags, those named (all of them unless known).
func registerConfigFlags(fs *flag.FlagSet, f *config.Flags, names []string, known bool) {
	all := flag.NewFlagSet("", flag.ContinueOnError)
	f.Register(all)
	all.VisitAll(func(fl *flag.Flag) {
		if !known || fl.Name == "config" || slices.Contains(names, fl.Name) {
			fs.Var(fl.Value, fl.Name, fl.Usage)
		}
	})
}

// parseConfigFlags parses the flags and the arguments between them. A
// configuration flag of another command is refused with the commands
// that take it, instead of the flag package's "not defined".
func parseConfigFlags(name string, fs *flag.FlagSet, args []string) ([]string, int) {
	var out bytes.Buffer
	fs.SetOutput(&out)
	err := fs.Parse(args)
	var pos []string
	if err == nil {
		pos, err = positionals(fs, args)
	}
	fs.SetOutput(os.Stderr)
	if flagName, ok := strings.CutPrefix(fmt.Sprint(err), "flag provided but not defined: -"); ok {
		if msg := foreignFlag(name, flagName); msg != "" {
			fmt.Fprintf(os.Stderr, "dlq %s: %s; see dlq %s -h\n", name, msg, name)
			return nil, ExitUsage
		}
	}
	_, _ = io.Copy(os.Stderr, &out)
	return pos, flagsExit(err)
}

// foreignFlag words why a configuration flag that another command takes
// is no flag of command name; "" when no command takes it.
func foreignFlag(name, flagName string) string {
	var takers []string
	for cmd, c := range configCommands {
		if slices.Contains(c.flags, flagName) {
			takers = append(takers, "dlq "+cmd)
		}
	}
	if len(takers) == 0 {
		return ""
	}
	slices.Sort(takers)
	msg := fmt.Sprintf("--%s is no flag of dlq %s, which does not use it (it is one of %s)", flagName, name, strings.Join(takers, ", "))
	if name == "migrate" && flagName == "no-migrate" {
		msg = "--no-migrate is no flag of dlq migrate, whose job is to apply the migrations: " +
			"dlq migrate --status shows them and changes nothing, and dlq serve --no-migrate starts without applying them"
	}
	return msg
}

func newLogger(c config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
