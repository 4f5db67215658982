package migrations

import (
	"io/fs"
	"testing"
)

func TestLatestIsTheHighestNumber(t *testing.T) {
	v, name, err := Latest()
	if err != nil {
		t.Fatal(err)
	}
	names, _ := fs.Glob(FS, "*.sql")
	for _, n := range names {
		if n > name {
			t.Fatalf("Latest() = %d %s, but %s sorts after it", v, name, n)
		}
	}
	if want := name[:5]; want == "" || v == 0 {
		t.Fatalf("Latest() = %d %s", v, name)
	}
}
