package cli

import "flag"

// confirmFlag registers a command's go-ahead for a large selection by
// filter under both names the commands use: ack and rm document --yes,
// replay documents --confirm. An operator who types the other command's
// name gets what was meant, not "flag provided but not defined" and the
// whole usage; the alias appears once in -h, as the same as the name.
func confirmFlag(fs *flag.FlagSet, p *bool, name, usage string) {
	alias := map[string]string{"yes": "confirm", "confirm": "yes"}[name]
	fs.BoolVar(p, name, false, usage)
	fs.BoolVar(p, alias, false, "the same as --"+name)
}
