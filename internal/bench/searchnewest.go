package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/dlq/dlq/store"
)

// searchNewestWait bounds both waits of searchNewest.
const searchNewestWait = 2 * time.Minute

// searchNewest measures what an operator meets right after a drain, with
// dlq still running: how long until a text search for a word of the
// newest message's body lists it (with text bodies, which have such a
// word: needle; nil without), and how long until the text indexer has
// every stored message's document. Each is -1 when it did not happen
// within searchNewestWait.
func searchNewest(st *store.Store, textBodies bool, needle string) (found, caughtUp *float64, err error) {
	ctx := context.Background()
	start := time.Now()
	since := func() *float64 { s := time.Since(start).Seconds(); return &s }
	for time.Since(start) < searchNewestWait && (caughtUp == nil || (textBodies && found == nil)) {
		if textBodies && found == nil {
			page, err := st.ListMessages(ctx, store.Filter{Status: "all", Query: needle}, store.ListOptions{Limit: 5})
			if err != nil {
				return nil, nil, fmt.Errorf("search the newest message for %q: %w", needle, err)
			}
			if len(page.Messages) > 0 {
				found = since()
			}
		}
		if caughtUp == nil {
			waiting, err := st.TextWaiting(ctx)
			if err != nil {
				return nil, nil, fmt.Errorf("rows waiting for the text indexer: %w", err)
			}
			if waiting == 0 {
				caughtUp = since()
			}
		}
		time.Sleep(100 * time.Millisecond) // the poll's interval
	}
	never := -1.0
	if textBodies && found == nil {
		found = &never
	}
	if caughtUp == nil {
		caughtUp = &never
	}
	return found, caughtUp, nil
}
