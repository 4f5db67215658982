package broker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
)

func TestSplitURLs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"amqp://guest:guest@127.0.0.1:5672/", []string{"amqp://guest:guest@127.0.0.1:5672/"}},
		{"amqp://a:5672/,amqp://b:5672/", []string{"amqp://a:5672/", "amqp://b:5672/"}},
		{" amqp://a/ , AMQPS://b/vh ,amqp://c ", []string{"amqp://a/", "AMQPS://b/vh", "amqp://c"}},
		// A comma in a password stays in its URL.
		{"amqp://u:p,w@a/,amqp://u:x,y,z@b/", []string{"amqp://u:p,w@a/", "amqp://u:x,y,z@b/"}},
		{"", []string{""}},
	} {
		require.Equal(t, c.want, broker.SplitURLs(c.in), "%q", c.in)
	}
}

func TestParseURLs(t *testing.T) {
	t.Parallel()
	urls, err := broker.ParseURLs("amqp://a/,amqps://b/")
	require.NoError(t, err)
	require.Equal(t, []string{"amqp://a/", "amqps://b/"}, urls)
	for _, bad := range []string{"", "http://a/", "amqp://a/,", "amqp://a/,,amqp://b/", "http://a/,amqp://b/"} {
		_, err := broker.ParseURLs(bad)
		require.Error(t, err, "%q", bad)
	}
	_, err = broker.ParseURLs("http://user:secret@a/,amqp://user:secret@b/")
	require.ErrorContains(t, err, "http://user:xxxxx@a/", "the refused URL is named, its password masked")
}
