package cli

import "flag"

// confirmFlag registers a command's go-ahead for a large selection by
// filter under both names the commands use: ack and rm document --yes,
// replay documents --confirm (documented). An operator who types the other
// command's name gets what was meant, not "flag provided but not defined"
// and the whole usage; the alias appears once in -h, as the same as the
// name. The names are written out, so that docs tests scanning the code
// for flags (deploy's runbook test) find both.
func confirmFlag(fs *flag.FlagSet, p *bool, documented, usage string) {
	yesUsage, confirmUsage := usage, "the same as --yes"
	if documented == "confirm" {
		yesUsage, confirmUsage = "the same as --confirm", usage
	}
	fs.BoolVar(p, "yes", false, yesUsage)
	fs.BoolVar(p, "confirm", false, confirmUsage)
}
