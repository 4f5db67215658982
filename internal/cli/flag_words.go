package cli

import "regexp"

// filterCommands are the commands with the filter flags (filterFlags),
// whose refused filters flagWords words.
var filterCommands = map[string]bool{"ls": true, "ack": true, "rm": true, "export": true}

// filterFlagNames are the filter flags of the API's filter parameters:
// ids are the commands' arguments.
var filterFlagNames = map[string]string{
	"source_queue": "--queue", "failed_after": "--after", "failed_before": "--before", "status": "--status",
	"reason": "--reason", "category": "--category", "group": "--group", "q": "--q", "field": "--field",
	"fields": "--field", "ids": "message ids",
}

// filterParam finds an API parameter name where an error names a field,
// as the console's labelize does: at the start or after a space or "(",
// before ":", ",", " (", a quote, " is", " must", " lists", " or" or the end.
var filterParam = regexp.MustCompile(`(^|[\s(])(source_queue|failed_after|failed_before|status|reason|category|group|q|fields|field|ids)(:|,| \(| "| is\b| must\b| lists\b| or\b|$)`)

// flagWords rewrites an API error about a filter in the command's flag
// names: the API's parameter names are not what the operator typed.
func flagWords(msg string) string {
	return filterParam.ReplaceAllStringFunc(msg, func(m string) string {
		sub := filterParam.FindStringSubmatch(m)
		return sub[1] + filterFlagNames[sub[2]] + sub[3]
	})
}
