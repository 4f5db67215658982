package replay

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

// The broker's death headers go by family, including members RabbitMQ
// may add later; application headers that merely look alike stay.
func TestBuildPublishingStripsDeathHeadersByPrefix(t *testing.T) {
	m := store.ClaimedMessage{
		ID: 42, ReplayCount: 2,
		Properties: []byte(`{"content_type":"text/plain","user_id":"billing","app_id":"shop"}`),
		Headers: []byte(`{
			"x-death": [{"count": {"type":"int64","value":1}, "reason": "rejected"}],
			"x-first-death-reason": "rejected",
			"x-first-death-queue": "orders",
			"x-first-death-exchange": "",
			"x-first-death-someday": "a member RabbitMQ may add",
			"x-last-death-reason": "expired",
			"x-last-death-queue": "orders",
			"x-last-death-exchange": "shop",
			"x-last-death-whatever": {"type":"int32","value":7},
			"x-delivery-count": {"type":"int64","value":3},
			"x-acquired-count": {"type":"int64","value":4},
			"x-death-note": "an application header",
			"x-first-deathly": "not the family",
			"tenant": "acme"
		}`),
		Body: []byte("body"),
	}
	pub, err := buildPublishing(m, "rid-1", false)
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"x-death-note":           "an application header",
		"x-first-deathly":        "not the family",
		"tenant":                 "acme",
		broker.HeaderID:          int64(42),
		broker.HeaderReplayCount: int64(3),
		broker.HeaderReplayID:    "rid-1",
	}, map[string]any(pub.Headers))
	require.Equal(t, "text/plain", pub.ContentType)
	require.Equal(t, "shop", pub.AppId)
	require.Empty(t, pub.UserId, "user_id is dropped by default")
	require.Equal(t, []byte("body"), pub.Body)

	pub, err = buildPublishing(m, "rid-2", true)
	require.NoError(t, err)
	require.Equal(t, "billing", pub.UserId, "keep_user_id keeps it")
}

func TestIsDeathHeader(t *testing.T) {
	for k, want := range map[string]bool{
		"x-death": true, "x-delivery-count": true, "x-acquired-count": true,
		"x-first-death-reason": true, "x-first-death-x": true, "x-last-death-queue": true, "x-last-death-": true,
		"x-deaths": false, "x-first-death": false, "x-last-deathx": false, "X-Death": false, "death": false, "": false,
	} {
		require.Equal(t, want, isDeathHeader(k), k)
	}
}
