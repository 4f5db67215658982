package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/dlq/dlq/store"
)

// nothingMatched says, on stderr, that a listing found nothing: a table
// with only its header reads as a hang or a fault. what is the line
// ("no messages match"); queue, when not "", is the --queue asked for:
// when dlq holds no message of it at all, a typo is likelier than a
// quiet queue, so it says that too. A failure to ask is not reported: the
// listing itself succeeded.
func (c *apiClient) nothingMatched(what, queue string) {
	fmt.Fprintf(c.env.stderr, "dlq %s: %s\n", c.name, what)
	if queue == "" {
		return
	}
	b, err := c.call(context.Background(), "GET", "/api/v1/status", nil, nil)
	if err != nil {
		return
	}
	var st struct {
		Queues []store.QueueStats `json:"queues"`
	}
	if json.Unmarshal(b, &st) != nil {
		return
	}
	for _, q := range st.Queues {
		if q.SourceQueue == queue {
			return
		}
	}
	fmt.Fprintf(c.env.stderr, "dlq %s: dlq holds no message of queue %q in any status (dlq status lists the queues it holds)\n", c.name, queue)
}

// listFull says, on stderr, that a list without cursors holds as many
// rows as --limit asked for: there may be more, which the table would
// otherwise hide without a word.
func listFull(w io.Writer, name string, rows, limit int) {
	if limit > 0 && rows >= limit {
		fmt.Fprintf(w, "dlq %s: showing the newest %d; --limit for more\n", name, limit)
	}
}
