package broker

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/dlq/dlq/internal/redact"
)

// SplitURLs splits s, one AMQP URL or the URLs of a cluster's nodes
// separated by commas, into its URLs. A URL may itself hold a comma (in a
// password, say), so a comma separates only where amqp:// or amqps://
// follows it; a piece that does not start so continues the URL before it,
// and a single URL stays whole as it always was. Two commas in a row, or
// one at either end, leave an empty URL, which ParseURLs refuses (write
// such commas in a password as %2C). Blanks around the commas are dropped.
func SplitURLs(s string) []string {
	var urls []string
	for _, piece := range strings.Split(s, ",") {
		trimmed := strings.TrimSpace(piece)
		lower := strings.ToLower(trimmed)
		starts := strings.HasPrefix(lower, "amqp://") || strings.HasPrefix(lower, "amqps://")
		if !starts && trimmed != "" && len(urls) > 0 {
			urls[len(urls)-1] += "," + piece
			continue
		}
		urls = append(urls, trimmed)
	}
	for i := range urls {
		urls[i] = strings.TrimSpace(urls[i])
	}
	return urls
}

// ParseURLs splits s as SplitURLs does and requires each URL to be an
// amqp:// or amqps:// URL.
func ParseURLs(s string) ([]string, error) {
	urls := SplitURLs(s)
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
			return nil, fmt.Errorf("broker: URL %q must be an amqp:// or amqps:// URL", redact.URL(raw))
		}
	}
	return urls, nil
}
