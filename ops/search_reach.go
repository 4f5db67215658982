package ops

import "github.com/dlq/dlq/store"

// SearchReach says what a search (q) of a caller reads beside identifying
// values and failure text (which it always reads: store/search.go), so
// that a door can say it in words: a search of every queue finds a
// body's words in its first store.BodyTextMax bytes only, and a body's
// bytes only within one source queue.
type SearchReach struct {
	// Words: new messages are given to the text index (text search is
	// on), so q's words are found in stacks, header values and, with
	// Bodies, the start of text bodies.
	Words bool
	// Bodies: the caller may see bodies and they are not sealed, so they
	// are searched: the words of their first BodyTextBytes bytes in every
	// queue (with Words), their every byte within one source queue.
	Bodies bool
	// BodyTextBytes is how much of a text body the text index holds.
	BodyTextBytes int
	// Encrypted: bodies and failure text are sealed at rest; q matches
	// identifying values only, whole.
	Encrypted bool
}

// SearchReach is what a search of c's reads.
func (s *Service) SearchReach(c Caller) SearchReach {
	enc := s.st.Encrypted()
	return SearchReach{Words: s.st.TextSearch() && !enc, Bodies: c.Principal.Bodies && !enc,
		BodyTextBytes: store.BodyTextMax, Encrypted: enc}
}
