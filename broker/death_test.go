package broker

import (
	"encoding/json"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestExtractDeathRealistic(t *testing.T) {
	t.Parallel()
	info := ExtractDeath(realisticHeaders())
	require.Equal(t, DeathInfo{
		Reason:           "rejected",
		SourceQueue:      "orders.created",
		SourceExchange:   "orders",
		SourceRoutingKey: "order.created.eu",
		Count:            3,
		FirstTime:        utc("2024-03-05T14:06:39Z"),
		LastTime:         utc("2024-03-05T14:07:09Z"),
		Deaths: []Death{
			{Queue: "orders.created", Reason: "rejected", Exchange: "orders", RoutingKeys: []string{"order.created.eu"}, Count: 3, Time: utc("2024-03-05T14:07:09Z")},
			{Queue: "orders.retry", Reason: "expired", Exchange: "", RoutingKeys: []string{"orders.retry"}, Count: 1, Time: utc("2024-03-05T14:06:39Z"), OriginalExpiration: "30000"},
		},
	}, info)

	got, err := json.Marshal(info.Deaths[1])
	require.NoError(t, err)
	require.JSONEq(t, `{"queue":"orders.retry","reason":"expired","exchange":"","routing_keys":["orders.retry"],"count":1,"time":"2024-03-05T14:06:39Z","original_expiration":"30000"}`, string(got))
}

func TestExtractDeath(t *testing.T) {
	t.Parallel()
	at := ts("2024-03-05T14:07:09Z")
	tests := []struct {
		name    string
		headers amqp.Table
		want    DeathInfo
	}{
		{
			name:    "no headers",
			headers: nil,
			want:    DeathInfo{Reason: "unknown"},
		},
		{
			name:    "application headers only",
			headers: amqp.Table{"traceparent": "00-abc"},
			want:    DeathInfo{Reason: "unknown"},
		},
		{
			name: "default exchange keeps empty exchange",
			headers: amqp.Table{"x-death": []any{amqp.Table{
				"count": int64(1), "exchange": "", "queue": "jobs", "reason": "rejected",
				"routing-keys": []any{"jobs"}, "time": at,
			}}},
			want: DeathInfo{
				Reason: "rejected", SourceQueue: "jobs", SourceExchange: "", SourceRoutingKey: "jobs", Count: 1,
				FirstTime: at.UTC(), LastTime: at.UTC(),
				Deaths: []Death{{Queue: "jobs", Reason: "rejected", RoutingKeys: []string{"jobs"}, Count: 1, Time: at.UTC()}},
			},
		},
		{
			name: "quorum queue delivery limit with CC routing keys",
			headers: amqp.Table{"x-death": []any{amqp.Table{
				"count": int64(1), "exchange": "events", "queue": "billing", "reason": "delivery_limit",
				"routing-keys": []any{"invoice.paid", "audit"}, "time": at,
			}}},
			want: DeathInfo{
				Reason: "delivery_limit", SourceQueue: "billing", SourceExchange: "events", SourceRoutingKey: "invoice.paid", Count: 1,
				FirstTime: at.UTC(), LastTime: at.UTC(),
				Deaths: []Death{{Queue: "billing", Reason: "delivery_limit", Exchange: "events", RoutingKeys: []string{"invoice.paid", "audit"}, Count: 1, Time: at.UTC()}},
			},
		},
		{
			name:    "maxlen from first-death headers only (x-death stripped by a client)",
			headers: amqp.Table{"x-first-death-queue": "bounded", "x-first-death-reason": "maxlen", "x-first-death-exchange": "ex"},
			want:    DeathInfo{Reason: "maxlen", SourceQueue: "bounded", SourceExchange: "ex", Count: 1},
		},
		{
			name: "last-death beats first-death",
			headers: amqp.Table{
				"x-first-death-queue": "a", "x-first-death-reason": "expired", "x-first-death-exchange": "",
				"x-last-death-queue": "b", "x-last-death-reason": "rejected", "x-last-death-exchange": "bx",
			},
			want: DeathInfo{Reason: "rejected", SourceQueue: "b", SourceExchange: "bx", Count: 1},
		},
		{
			name: "garbage first entry falls back to last-death, count from matching entry",
			headers: amqp.Table{
				"x-death": []any{
					amqp.Table{"queue": int8(1), "reason": true},
					amqp.Table{"queue": "b", "reason": "rejected", "count": int32(4), "routing-keys": []any{"rk"}},
				},
				"x-last-death-queue": "b", "x-last-death-reason": "rejected", "x-last-death-exchange": "",
			},
			want: DeathInfo{
				Reason: "rejected", SourceQueue: "b", SourceRoutingKey: "rk", Count: 4,
				Deaths: []Death{
					{RoutingKeys: []string{}},
					{Queue: "b", Reason: "rejected", RoutingKeys: []string{"rk"}, Count: 4},
				},
			},
		},
		{
			name:    "reason case and unknown reasons",
			headers: amqp.Table{"x-death": []any{amqp.Table{"queue": "q", "reason": " REJECTED ", "count": int64(2)}}},
			want: DeathInfo{
				Reason: "rejected", SourceQueue: "q", Count: 2,
				Deaths: []Death{{Queue: "q", Reason: " REJECTED ", RoutingKeys: []string{}, Count: 2}},
			},
		},
		{
			name:    "unrecognised reason keeps metric labels bounded",
			headers: amqp.Table{"x-death": []any{amqp.Table{"queue": "q", "reason": "exploded"}}},
			want: DeathInfo{
				Reason: "unknown", SourceQueue: "q", Count: 1,
				Deaths: []Death{{Queue: "q", Reason: "exploded", RoutingKeys: []string{}}},
			},
		},
		{
			name: "wrong but readable types: bytes, int32 count, string count, single routing key, unix time",
			headers: amqp.Table{"x-death": []any{amqp.Table{
				"queue": []byte("q"), "reason": []byte("expired"), "exchange": []byte("x"),
				"routing-keys": "rk", "count": "7", "time": int64(1709647629),
			}}},
			want: DeathInfo{
				Reason: "expired", SourceQueue: "q", SourceExchange: "x", SourceRoutingKey: "rk", Count: 7,
				FirstTime: utc("2024-03-05T14:07:09Z"), LastTime: utc("2024-03-05T14:07:09Z"),
				Deaths: []Death{{Queue: "q", Reason: "expired", Exchange: "x", RoutingKeys: []string{"rk"}, Count: 7, Time: utc("2024-03-05T14:07:09Z")}},
			},
		},
		{
			name: "unreadable values read as absent, count at least 1",
			headers: amqp.Table{"x-death": []any{
				"not a table", nil, int64(5),
				amqp.Table{
					"queue": "q", "reason": "rejected", "count": int64(-3), "time": time.Unix(1<<40, 0),
					"routing-keys": []any{int8(1), "ok", nil}, "original-expiration": int32(5),
				},
			}},
			want: DeathInfo{
				Reason: "rejected", SourceQueue: "q", SourceRoutingKey: "ok", Count: 1,
				Deaths: []Death{{Queue: "q", Reason: "rejected", RoutingKeys: []string{"ok"}, Count: -3}},
			},
		},
		{
			name:    "x-death not an array",
			headers: amqp.Table{"x-death": amqp.Table{"queue": "q"}},
			want:    DeathInfo{Reason: "unknown"},
		},
		{
			name:    "x-death empty array",
			headers: amqp.Table{"x-death": []any{}},
			want:    DeathInfo{Reason: "unknown"},
		},
		{
			name:    "x-death built by a Go caller as []amqp.Table",
			headers: amqp.Table{"x-death": []amqp.Table{{"queue": "q", "reason": "expired", "count": int64(1)}}},
			want: DeathInfo{
				Reason: "expired", SourceQueue: "q", Count: 1,
				Deaths: []Death{{Queue: "q", Reason: "expired", RoutingKeys: []string{}, Count: 1}},
			},
		},
		{
			name:    "delivery-limit spelled with a hyphen",
			headers: amqp.Table{"x-first-death-queue": "q", "x-first-death-reason": "Delivery-Limit"},
			want:    DeathInfo{Reason: "delivery_limit", SourceQueue: "q", Count: 1},
		},
		{
			name:    "first-death headers of the wrong type",
			headers: amqp.Table{"x-first-death-queue": int64(1), "x-first-death-reason": amqp.Table{}},
			want:    DeathInfo{Reason: "unknown"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := ExtractDeath(tt.headers)
			require.Equal(t, tt.want, got)
			_, err := json.Marshal(got.Deaths)
			require.NoError(t, err)
		})
	}
}

// A message that went around a retry loop several times: entries for the
// same (queue, reason) are counted, the most recent moves to the front.
func TestExtractDeathTimes(t *testing.T) {
	t.Parallel()
	h := amqp.Table{"x-death": []any{
		amqp.Table{"queue": "work", "reason": "rejected", "count": int64(5), "time": ts("2024-01-01T10:00:00Z"), "exchange": "ex", "routing-keys": []any{"work"}},
		amqp.Table{"queue": "work.wait", "reason": "expired", "count": int64(4), "time": ts("2024-01-01T10:00:30Z"), "exchange": "", "routing-keys": []any{"work.wait"}},
	}}
	info := ExtractDeath(h)
	require.Equal(t, "rejected", info.Reason)
	require.Equal(t, int64(5), info.Count)
	require.Equal(t, utc("2024-01-01T10:00:00Z"), info.FirstTime)
	require.Equal(t, utc("2024-01-01T10:00:30Z"), info.LastTime)
	require.Equal(t, time.UTC, info.FirstTime.Location())
}

func BenchmarkExtractDeath(b *testing.B) {
	h := realisticHeaders()
	b.ReportAllocs()
	for b.Loop() {
		_ = ExtractDeath(h)
	}
}

// The death record ingest writes by hand is exactly what encoding/json
// writes for the same entries (the API showed json.Marshal's output).
func TestAppendDeathsJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	texts := []string{"", "orders", "caf\xe9", "a\x00b", "<a>&\"\\", "\u2028\u2029", "\t\n\r\b\f\x01\x1f\x7f",
		"\ufffd", "日本語 🙂", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf"}
	times := []time.Time{{}, utc("2024-03-05T14:07:09Z"), time.Unix(0, 0).UTC(), utc("9999-12-31T23:59:59Z"),
		time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)}
	var cases [][]Death
	cases = append(cases, nil, []Death{})
	for i, s := range texts {
		d := Death{Queue: s, Reason: texts[(i+1)%len(texts)], Exchange: texts[(i+2)%len(texts)],
			RoutingKeys: []string{s, texts[(i+3)%len(texts)]}, Count: int64(i*i*1000003 - 7),
			Time: times[i%len(times)], OriginalExpiration: texts[(i+4)%len(texts)]}
		cases = append(cases, []Death{d})
		d.RoutingKeys = nil
		d.Count = -1 << 63
		cases = append(cases, []Death{d, {RoutingKeys: []string{}, Count: 1<<63 - 1, Time: times[(i+1)%len(times)]}})
	}
	for _, deaths := range cases {
		want, err := json.Marshal(deaths)
		require.NoError(t, err)
		require.Equal(t, string(want), string(AppendDeathsJSON(nil, deaths)))
		require.Equal(t, "x"+string(want), string(AppendDeathsJSON([]byte("x"), deaths)), "appends")
	}
}

// HeaderInt reads the integers publishers write, of any AMQP width or as
// a decimal string; a string out of int64's range, which any publisher may
// send, is no number (strconv answers its bound with the error, and an
// x-dlq-id or x-dlq-edited-from of 9223372036854775807 named no message).
func TestHeaderInt(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int64
	}{
		{int64(42), 42}, {int32(-7), -7}, {int16(3), 3}, {int8(2), 2}, {uint8(9), 9}, {uint16(65535), 65535},
		{uint32(4294967295), 4294967295}, {"17", 17}, {" 18 ", 18}, {[]byte("19"), 19},
		{"99999999999999999999", 0}, {"-99999999999999999999", 0}, {"12a", 0}, {1.5, 0}, {nil, 0}, {true, 0},
	} {
		if got := HeaderInt(c.v); got != c.want {
			t.Errorf("HeaderInt(%#v) = %d, want %d", c.v, got, c.want)
		}
	}
}
