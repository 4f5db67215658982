package control_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
)

// ParseCommand never panics, stays within its size limit, and either
// accepts a command (which then survives a JSON round trip unchanged) or
// refuses it with a known code and a message.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{
		`{"command":"replay","command_id":"c1","ids":[1,2,3]}`,
		`{"command":"replay","command_id":"c2","filter":{"source_queue":"orders","reason":"rejected","failed_after":"2026-01-02T03:04:05Z"},"limit":10,"rate_per_second":50,"delay_seconds":60,"target":{"exchange":"","routing_key":"orders"},"canary":{"count":5,"wait_seconds":30},"force":true}`,
		`{"command":"replay","command_id":"c3","filter":{},"dry_run":true}`,
		`{"command":"replay","command_id":"c3a","ids":[5],"start_at":"2026-06-01T02:00:00+02:00"}`,
		`{"command":"cancel_replay","command_id":"c3b","id":4,"start_at":"2026-06-01T02:00:00Z"}`,
		`{"command":"acknowledge","command_id":"c4","ids":[7],"dry_run":true}`,
		`{"command":"delete","command_id":"c5","filter":{"status":"acknowledged"},"confirm":true,"limit":100}`,
		`{"command":"cancel_replay","command_id":"c6","id":4}`,
		`{"command":"replay_status","command_id":"c7","id":4}`,
		`{"command":"list_replays","command_id":"c8","limit":20}`,
		`{"command":"replay","command_id":"c9","ids":[-1]}`,
		`{"command":"replay'; DROP TABLE dead_messages; --","command_id":"x"}`,
		`{"command":"replay","command_id":"x","ids":["1 OR 1=1"]}`,
		`{"command":"replay","command_id":"x","ids":[1e999]}`,
		`{"command":"purge"}`,
		`{"command":"edit_replay","command_id":"e1","id":7,"body":"{\"ok\":true}","set_headers":{ "a" : {"type":"int32","value":1} },"remove_headers":["b"],"dry_run":true}`,
		`{"command":"approve","command_id":"a1","id":3}`,
		`{"command":"reject","command_id":"r1","id":3,"reason":"too many"}`,
		`{"command":"list_approvals","command_id":"l1","limit":5}`,
		`[1,2,3]`, `null`, `{`, ``, "\x00\xff",
		`{"command":"list_replays","command_id":"a"} trailing`,
	} {
		f.Add([]byte(s))
	}
	codes := map[string]bool{
		control.CodeTooLarge: true, control.CodeInvalidJSON: true, control.CodeUnknownCommand: true, control.CodeInvalidRequest: true,
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		const limit = 4096
		c, err := control.ParseCommand(body, limit)
		if err != nil {
			require.True(t, codes[err.Code], "unexpected code %q", err.Code)
			require.NotEmpty(t, err.Message)
			require.LessOrEqual(t, len(err.Message), 1000, "messages stay short whatever the input")
			return
		}
		require.LessOrEqual(t, len(body), limit)
		require.NotEmpty(t, c.CommandID)
		again, err2 := json.Marshal(c)
		require.NoError(t, err2)
		c2, perr := control.ParseCommand(again, 1<<20)
		require.Nil(t, perr, "a parsed command re-encodes to a valid one: %s", again)
		require.Equal(t, c, c2)
	})
}
