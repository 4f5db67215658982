package bench

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
)

// Each run makes its own schema and RabbitMQ names, with a random suffix.

// withSearchPath returns dsn with its search_path set to path: a store
// opened on it works in the run's schema.
func withSearchPath(dsn, path string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("-pg must be a postgres:// URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", path)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// randomHex returns n random bytes in hex: the suffix of a run's names.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}
