package timefmt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A time in another zone is shown as the same instant in UTC, saying so.
func TestHumanIsUTCWithItsZone(t *testing.T) {
	t.Parallel()
	paris := time.FixedZone("CEST", 2*60*60)
	at := time.Date(2024, 5, 1, 14, 0, 5, 999_000_000, paris)
	require.Equal(t, "2024-05-01 12:00:05 UTC", Human(at))
}
