package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/dlq/dlq/config"
)

// LoadConfig parses a subcommand's flags (the configuration's, and those
// extra registers) and loads the configuration, for the subcommands that
// read it: serve, migrate and topology, and the replay commands. The code
// is negative when the subcommand goes on; otherwise it is the exit code
// (ExitOK after -h, ExitUsage for a bad flag or configuration).
func LoadConfig(name string, args []string, extra func(*flag.FlagSet)) (config.Config, *slog.Logger, *flag.FlagSet, int) {
	fs := flag.NewFlagSet("dlq "+name, flag.ContinueOnError)
	var f config.Flags
	f.Register(fs)
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return config.Config{}, nil, nil, ExitOK
		}
		return config.Config{}, nil, nil, ExitUsage
	}
	cfg, err := config.Load(f, os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq %s: %v\n", name, err)
		return config.Config{}, nil, nil, ExitUsage
	}
	return cfg, newLogger(cfg.Log), fs, -1
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
