package redact

import (
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// FuzzURL checks URL against the parsers that really read dlq's connection
// strings: pgx (PostgreSQL URLs and keyword=value) and net/url (AMQP, whose
// amqp091.ParseURI takes the password from net/url, and the management
// API). Whatever one of them takes as a password,
// or as the value of a parameter not on the shown list, must not survive in
// URL's output; and read back by the same parser, the output holds no
// password but the mask.
func FuzzURL(f *testing.F) {
	for _, s := range []string{
		"amqp://guest:guest@127.0.0.1:5672/",
		"amqps://u:p@ss@h:5671/vhost?heartbeat=10&token=t",
		"postgres://dlq:pw@db:5432/dlq?sslmode=disable&password=pw2",
		"postgresql://u:1234#@host/db",
		"postgres://u@h?password=s@x/db",
		"host=db user=dlq password='a b\\' c' sslpassword=x\\ y dbname=dlq",
		"password= host=db",
		"a://b=c password=pw",
		"//u:pw@h/?a=b#&c=d",
		"http://guest:guest@127.0.0.1:15672/api/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := URL(in)
		// Escapes make a secret's text differ from what the input holds,
		// which the count below cannot follow; reading the output back
		// still applies.
		plain := !strings.ContainsAny(in, `%\'+`)
		hidden := func(who, secret string) {
			if !plain || secret == "" || strings.Contains(secret, Mask[:1]) {
				return // the mask itself could spell it
			}
			// Every text URL keeps is a piece of the input outside the
			// hidden spans, so a secret it shows is a copy found in the
			// input too; the secret's own place must not be among them.
			if n := strings.Count(out, secret); n > 0 && n >= strings.Count(in, secret) {
				t.Fatalf("%s reads %q from %q; URL shows it: %q", who, secret, in, out)
			}
		}
		masked := func(who, got string) {
			if got != "" && got != Mask {
				t.Fatalf("%s reads password %q from URL(%q) = %q", who, got, in, out)
			}
		}

		if c, err := pgconn.ParseConfig(in); err == nil {
			hidden("pgx", c.Password)
			for k, v := range c.RuntimeParams {
				// A keyword holding "://" is a URL pgx misread (see
				// keywordValueSpans); what follows its '=' is a URL query.
				if !shown(k) && !strings.Contains(k, "://") {
					hidden("pgx runtime param "+k, v)
				}
			}
			if c, err := pgconn.ParseConfig(out); err == nil {
				masked("pgx", c.Password)
			}
		}
		if u, err := url.Parse(in); err == nil {
			p, _ := u.User.Password()
			hidden("net/url", p)
			for k, vs := range u.Query() {
				if !shown(k) {
					for _, v := range vs {
						hidden("net/url query "+k, v)
					}
				}
			}
			if u, err := url.Parse(out); err == nil {
				p, _ := u.User.Password()
				masked("net/url", p)
			}
		}
	})
}
