package crypt

import (
	"crypto/rand"
	"testing"
)

// The data-key choice, measured (docs/BENCHMARKS.md, "Encryption at
// rest"): a row as ingest writes it, a 1 KiB body and ~600 bytes of
// properties, headers and failure, sealed under its own data key
// (BenchmarkSealRow) against one data key shared by a batch of 500 rows
// (BenchmarkSealRowSharedKey, a counter nonce per row). And opened, as a
// replay does it.

func benchRow() (body, meta []byte) {
	body = make([]byte, 1024)
	meta = make([]byte, 600)
	_, _ = rand.Read(body)
	_, _ = rand.Read(meta)
	return body, meta
}

func BenchmarkSealRow(b *testing.B) {
	r := testRing(b, testKey(b, "k1"))
	body, meta := benchRow()
	out := make([]byte, 0, 2048)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s, err := r.NewSealer()
		if err != nil {
			b.Fatal(err)
		}
		ref := Ref{Table: "dead_messages", Row: int64(i)}
		out = s.Seal(out[:0], ref, FieldBody, body)
		out = s.Seal(out[:0], ref, FieldMeta, meta)
	}
}

func BenchmarkSealRowSharedKey(b *testing.B) {
	r := testRing(b, testKey(b, "k1"))
	body, meta := benchRow()
	out := make([]byte, 0, 2048)
	var s *Sealer
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%500 == 0 {
			var err error
			if s, err = r.NewSealer(); err != nil {
				b.Fatal(err)
			}
		}
		s.env.Nonce[8], s.env.Nonce[9] = byte(i), byte(i>>8)
		ref := Ref{Table: "dead_messages", Row: int64(i)}
		out = s.Seal(out[:0], ref, FieldBody, body)
		out = s.Seal(out[:0], ref, FieldMeta, meta)
	}
}

func BenchmarkOpenRow(b *testing.B) {
	r := testRing(b, testKey(b, "k1"))
	body, meta := benchRow()
	s, _ := r.NewSealer()
	ref := Ref{Table: "dead_messages", Row: 1}
	cb := s.Seal(nil, ref, FieldBody, body)
	cm := s.Seal(nil, ref, FieldMeta, meta)
	out := make([]byte, 0, 2048)
	b.ReportAllocs()
	for b.Loop() {
		k, err := r.Unwrap(s.Envelope())
		if err != nil {
			b.Fatal(err)
		}
		if out, err = k.Open(out[:0], ref, FieldBody, cb); err != nil {
			b.Fatal(err)
		}
		if out, err = k.Open(out[:0], ref, FieldMeta, cm); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIndexKey(b *testing.B) {
	r := testRing(b, testKey(b, "k1"))
	x, _, _, _ := r.NewIndex()
	b.ReportAllocs()
	for b.Loop() {
		_ = x.Key("3f2c9a1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b")
	}
}
