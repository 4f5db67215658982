package control_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
)

// A field that means nothing for a command is refused, naming it, rather
// than accepted and dropped: edit_replay with start_at once started the
// edited copy at once although the caller asked for later (the HTTP door
// refuses start_at there too).
func TestParseCommandRefusesFieldsTheCommandDoesNotTake(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"command":"edit_replay","command_id":"e1","id":1,"body":"{}","start_at":"2030-01-01T00:00:00Z"}`: "edit_replay does not take start_at",
		`{"command":"edit_replay","command_id":"e2","id":1,"body":"{}","rate_per_second":5}`:               "edit_replay does not take rate_per_second",
		`{"command":"acknowledge","command_id":"a1","ids":[1],"body":"{}"}`:                                "acknowledge does not take body",
		`{"command":"replay_status","command_id":"s1","id":1,"limit":3}`:                                   "replay_status does not take limit",
	} {
		_, err := control.ParseCommand([]byte(body), 1<<20)
		require.NotNil(t, err, body)
		require.Equal(t, control.CodeInvalidRequest, err.Code, body)
		require.Contains(t, err.Message, want, body)
	}
	_, err := control.ParseCommand([]byte(`{"command":"edit_replay","command_id":"e3","id":1,"body":"{}"}`), 1<<20)
	require.Nil(t, err)
}

// A field of the wrong JSON type is named as the caller wrote it, not by
// the Go type that embeds it ("Request.ids").
func TestParseCommandNamesWrongTypedFields(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"command":"replay","command_id":"r1","ids":"x"}`:            "field ids must be",
		`{"command":"replay","command_id":"r2","filter":{"ids":"x"}}`: "field filter.ids must be",
	} {
		_, err := control.ParseCommand([]byte(body), 1<<20)
		require.NotNil(t, err, body)
		require.Contains(t, err.Message, want, body)
		require.NotContains(t, err.Message, "Request.", body)
	}
}
