package crypt

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/dlq/dlq/internal/secrets"
)

// KeySize is the size of every key: AES-256.
const KeySize = 32

// Key is one key-encryption key. It never prints its secret: String,
// Format and LogValue show the id only.
type Key struct {
	ID     string
	secret []byte
}

// NewKey makes a key from its id and 32-byte secret.
func NewKey(id string, secret []byte) (Key, error) {
	if !keyIDRe.MatchString(id) {
		return Key{}, fmt.Errorf("crypt: key id %q must be 1 to 64 letters, digits, '.', '_' or '-'", id)
	}
	if len(secret) != KeySize {
		return Key{}, fmt.Errorf("crypt: key %s: the secret must be %d bytes, not %d", id, KeySize, len(secret))
	}
	return Key{ID: id, secret: append([]byte(nil), secret...)}, nil
}

func (k Key) String() string { return "crypt.Key(" + k.ID + ")" }

// Format writes what String writes, whatever the verb: %d or %x must not
// print the secret either.
func (k Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue shows the id only.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.ID) }

var keyIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ParseKeys reads a key list: entries "id:base64" separated by commas or
// new lines; blank lines and lines starting with # are skipped (a key
// file may carry comments). Errors name the entry by position and id,
// never its secret.
func ParseKeys(text string) ([]Key, error) {
	var keys []Key
	seen := map[string]bool{}
	secretsSeen := map[string]string{}
	n := 0
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, entry := range strings.Split(line, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			n++
			id, enc, ok := strings.Cut(entry, ":")
			if !ok {
				return nil, fmt.Errorf("crypt: encryption key %d is not id:base64 (a key id, a colon, then the base64 of %d random bytes)", n, KeySize)
			}
			id = strings.TrimSpace(id)
			if !keyIDRe.MatchString(id) {
				return nil, fmt.Errorf("crypt: encryption key %d: id %q must be 1 to 64 letters, digits, '.', '_' or '-'", n, id)
			}
			secret, err := decodeSecret(strings.TrimSpace(enc))
			if err != nil {
				return nil, fmt.Errorf("crypt: encryption key %d (id %s): %w", n, id, err)
			}
			if seen[id] {
				return nil, fmt.Errorf("crypt: encryption key %d: id %s is listed twice", n, id)
			}
			if other, dup := secretsSeen[string(secret)]; dup {
				return nil, fmt.Errorf("crypt: encryption keys %s and %s have the same secret: a new key needs new random bytes", other, id)
			}
			seen[id] = true
			secretsSeen[string(secret)] = id
			keys = append(keys, Key{ID: id, secret: secret})
		}
	}
	return keys, nil
}

func decodeSecret(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("the secret must be the base64 of %d bytes, not of %d (make one with: openssl rand -base64 32)", KeySize, len(b))
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("the secret is not valid base64 (make one with: openssl rand -base64 32)")
}

// ErrNoKeys is LoadKeys' answer when both settings are empty: encryption
// is off.
var ErrNoKeys = errors.New("crypt: no encryption keys configured")

// LoadKeys reads the keys of DLQ_ENCRYPTION_KEYS (list) or
// DLQ_ENCRYPTION_KEYS_FILE (file, one key per line, private to its owner:
// package secrets). Giving both is an error; giving neither is ErrNoKeys.
func LoadKeys(list, file string) ([]Key, error) {
	switch {
	case list != "" && file != "":
		return nil, errors.New("crypt: set DLQ_ENCRYPTION_KEYS or DLQ_ENCRYPTION_KEYS_FILE, not both")
	case file != "":
		text, err := secrets.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("crypt: DLQ_ENCRYPTION_KEYS_FILE: %w", err)
		}
		keys, err := ParseKeys(text)
		if err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, file)
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("crypt: DLQ_ENCRYPTION_KEYS_FILE %s holds no key", file)
		}
		return keys, nil
	case list != "":
		keys, err := ParseKeys(list)
		if err != nil {
			return nil, fmt.Errorf("%w (in DLQ_ENCRYPTION_KEYS)", err)
		}
		if len(keys) == 0 {
			return nil, errors.New("crypt: DLQ_ENCRYPTION_KEYS holds no key")
		}
		return keys, nil
	}
	return nil, ErrNoKeys
}
