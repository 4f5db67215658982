package store

import "fmt"

// searchConds renders the text search (q) and failure group conditions.
// The search and grouping feature owns this file.
func (f Filter) searchConds(args *sqlArgs) ([]string, error) {
	if f.Query != "" || f.Group != "" {
		return nil, fmt.Errorf("%w: q and group are not supported yet", ErrInvalidFilter)
	}
	return nil, nil
}
