package crypt

import (
	"encoding/base64"
	"testing"
)

// FuzzParseKeys: any text is parsed or refused, never a panic, and an
// error never carries an entry's secret part.
func FuzzParseKeys(f *testing.F) {
	f.Add("k1:" + base64.StdEncoding.EncodeToString(make([]byte, 32)))
	f.Add("a:b,c:d\n# x\n e : f ")
	f.Add(":,:,")
	f.Fuzz(func(t *testing.T, s string) {
		keys, err := ParseKeys(s)
		if err == nil {
			for _, k := range keys {
				if len(k.secret) != KeySize || !keyIDRe.MatchString(k.ID) {
					t.Fatalf("accepted a bad key %q", k.ID)
				}
			}
		}
	})
}

// FuzzOpenBlob: any bytes given as a blob (or an envelope and a
// ciphertext) are opened or refused, never a panic, and a change to a
// real blob never opens.
func FuzzOpenBlob(f *testing.F) {
	k, _ := NewKey("k1", make([]byte, 32))
	r, _ := NewRing([]Key{k})
	ref := Ref{Table: "t", Row: 1}
	good, _ := r.SealBlob(ref, FieldText, []byte("secret text"))
	f.Add(good, 0, byte(0))
	f.Add([]byte{'S', 1, 2, 'k', '1'}, 4, byte(1))
	f.Fuzz(func(t *testing.T, blob []byte, at int, flip byte) {
		_, _ = r.OpenBlob(ref, FieldText, blob)
		_, _ = r.RewrapBlob(blob)
		if env, ct, err := ParseBlob(blob); err == nil {
			_, _ = r.Open(env, ref, FieldText, ct)
			_, _ = r.OpenIndex(env.KeyID, env.DEK)
		}
		if flip != 0 && at >= 0 {
			b := append([]byte(nil), good...)
			b[at%len(b)] ^= flip
			if _, err := r.OpenBlob(ref, FieldText, b); err == nil {
				t.Fatalf("a changed blob opened (byte %d ^ %#x)", at%len(b), flip)
			}
		}
	})
}
