package redact

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, in, want string }{
		// AMQP.
		{"amqp password", "amqp://guest:guest@127.0.0.1:5672/", "amqp://guest:xxxxx@127.0.0.1:5672/"},
		{"amqps vhost kept", "amqps://dlq:s3cret@rabbit.example:5671/prod", "amqps://dlq:xxxxx@rabbit.example:5671/prod"},
		{"amqp no password", "amqp://rabbit:15672", "amqp://rabbit:15672"},
		{"amqp user only", "amqp://guest@rabbit/", "amqp://guest@rabbit/"},
		{"empty password shown hidden", "amqp://guest:@rabbit/", "amqp://guest:xxxxx@rabbit/"},
		{"amqp harmless query", "amqp://u:p@h/?heartbeat=10&channel_max=5", "amqp://u:xxxxx@h/?heartbeat=10&channel_max=5"},
		{"amqp token in query", "amqp://h/?heartbeat=10&token=abc", "amqp://h/?heartbeat=10&token=xxxxx"},
		{"unknown parameter hidden", "amqp://h/?keyfile=/etc/key.pem", "amqp://h/?keyfile=xxxxx"},
		{"bare query token", "amqp://h/?abcdef", "amqp://h/?xxxxx"},
		{"at sign in password", "amqp://u:p@ss@h/", "amqp://u:xxxxx@h/"},
		{"colon in password", "amqp://u:a:b@h/", "amqp://u:xxxxx@h/"},
		{"no // before user info", "amqp//guest:s3cret@h:5672/", "xxxxx@h:5672/"},
		{"no scheme either", "dlq:s3cret@db:5432/dlq", "xxxxx@db:5432/dlq"},
		{"postgres without //", "postgres//dlq:s3/cr@t@db:5432/dlq", "xxxxx@db:5432/dlq"},

		// PostgreSQL URLs.
		{"postgres password", "postgres://dlq:pw@db:5432/dlq?sslmode=disable", "postgres://dlq:xxxxx@db:5432/dlq?sslmode=disable"},
		{"postgresql password in query", "postgresql://db/dlq?user=dlq&password=pw", "postgresql://db/dlq?user=dlq&password=xxxxx"},
		{"sslpassword", "postgres://db/dlq?sslpassword=pw&sslmode=verify-full", "postgres://db/dlq?sslpassword=xxxxx&sslmode=verify-full"},
		{"multiple hosts", "postgres://u:pw@h1:5432,h2:5433/dlq", "postgres://u:xxxxx@h1:5432,h2:5433/dlq"},
		{"no password", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"},
		// pgx ends the user info at the first '@' and reads '#' as part of
		// the query; net/url ends the authority at '#' and would see no
		// password here at all.
		{"hash before at", "postgres://u:1234#@host/db", "postgres://u:xxxxx@host/db"},
		{"hash in query", "postgres://h/db?sslmode=disable#&password=pw", "postgres://h/db?sslmode=disable#&password=xxxxx"},
		// net/url reads a query from the first '?', '@' or not.
		{"question mark in user info", "amqp://u?password=s@h/", "amqp://u?xxxxx"},
		{"pgx query after the first at", "postgres://u@h?sslmode=1&password=s@y/db", "postgres://u@h?xxxxx"},
		{"each parser's query start", "postgres://u?host=h@h/db?password=s", "postgres://u?xxxxx@h/db?password=xxxxx"},
		{"encoded key hidden", "postgres://h/db?pass%77ord=pw", "postgres://h/db?pass%77ord=xxxxx"},
		{"other scheme", "mysql://u:secret@db/dlq", "mysql://u:xxxxx@db/dlq"},
		{"management API", "http://guest:guest@127.0.0.1:15672/", "http://guest:xxxxx@127.0.0.1:15672/"},
		{"leading space", " postgres://u:pw@h/db", " postgres://u:xxxxx@h/db"},
		{"no scheme", "//u:pw@h/", "//u:xxxxx@h/"},

		// keyword=value.
		{"kv password", "host=db user=dlq password=pw dbname=dlq", "host=db user=dlq password=xxxxx dbname=dlq"},
		{"kv spaces around =", "host=db password = pw sslmode=disable", "host=db password = xxxxx sslmode=disable"},
		{"kv quoted", "password='a b\\' c' host=db", "password=xxxxx host=db"},
		{"kv escaped space", `password=a\ b host=db`, "password=xxxxx host=db"},
		{"kv sslpassword", "sslpassword=pw sslmode=require", "sslpassword=xxxxx sslmode=require"},
		{"kv unknown key hidden", "host=db options='-c app.secret=x'", "host=db options=xxxxx"},
		// pgx takes the next word as the value of an empty one.
		{"kv empty value", "password= host=db", "password= xxxxx"},
		{"kv empty at end", "host=db password=", "host=db password=xxxxx"},
		{"kv unterminated quote", "host=db password='pw", "host=db password=xxxxx"},
		{"kv space in keyword", "host=db pass word=pw", "host=db pass word=xxxxx"},
		{"kv after a URL-looking keyword", "a://b=c password=pw", "a://b=c password=xxxxx"},
		{"URL with kv tail", "x://y password=pw", "x://y password=xxxxx"},

		// Nothing to hide.
		{"empty", "", ""},
		{"word", "dlq", "dlq"},
		{"http no password", "http://rabbit:5672/", "http://rabbit:5672/"},
		{"no host", "amqp://", "amqp://"},
		{"not a URL", "rabbit:5672", "rabbit:5672"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, URL(tt.in))
		})
	}
}

func TestWebhook(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"https://hooks.slack.com/services/T000/B000/secret-token-path", "https://hooks.slack.com"},
		{"https://u:pw@am.example:9093/api/v2/alerts?token=t#f", "https://am.example:9093"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"ftp://am", "ftp://am"},
		{"not a url", "<invalid url>"},
		{"/relative/secret", "<invalid url>"},
		{"https://hooks.slack.com:secret/x", "<invalid url>"},
		{"", "<invalid url>"},
	} {
		require.Equal(t, tt.want, Webhook(tt.in), "Webhook(%q)", tt.in)
	}
}
