// Command dlq-release writes the release's container image as an OCI image
// archive, with no container engine (package ociimage). `make release`
// runs it after building the binaries:
//
//	dlq-release -version 0.1.0 -revision abc123 -created 1764000000 \
//	    -ca /etc/ssl/certs/ca-certificates.crt -o dist/dlq-0.1.0-oci.tar \
//	    amd64=dist/dlq-0.1.0-linux-amd64 arm64=dist/dlq-0.1.0-linux-arm64
//
// It prints the digest of the release's image index.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dlq/dlq/internal/ociimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "dlq-release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("dlq-release", flag.ContinueOnError)
	version := fs.String("version", "", "the release (the file VERSION). Required.")
	revision := fs.String("revision", "", "the commit the binaries were built from")
	created := fs.Int64("created", 0, "the image's time in Unix seconds (the commit's time keeps the archive reproducible). Required.")
	ca := fs.String("ca", "", "a PEM bundle of CA certificates to put in the image (e.g. /etc/ssl/certs/ca-certificates.crt)")
	out := fs.String("o", "", "the archive to write. Required.")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: dlq-release -version V -created UNIX -o ARCHIVE [-revision R] [-ca PEM] ARCH=BINARY...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := ociimage.Config{Version: *version, Revision: *revision}
	if *created > 0 {
		cfg.Created = time.Unix(*created, 0)
	}
	if *out == "" {
		return errors.New("-o (the archive to write) is required")
	}
	if *ca != "" {
		b, err := os.ReadFile(*ca)
		if err != nil {
			return fmt.Errorf("read the CA bundle: %w", err)
		}
		cfg.CACertificates = b
	}
	if fs.NArg() == 0 {
		return errors.New("name at least one binary as ARCH=PATH (e.g. amd64=dist/dlq-linux-amd64)")
	}
	for _, a := range fs.Args() {
		arch, path, ok := strings.Cut(a, "=")
		if !ok || arch == "" || path == "" {
			return fmt.Errorf("binary %q: want ARCH=PATH, e.g. amd64=dist/dlq-linux-amd64", a)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read the %s binary: %w", arch, err)
		}
		cfg.Platforms = append(cfg.Platforms, ociimage.Platform{Architecture: arch, Binary: b})
	}
	f, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("create the archive: %w", err)
	}
	digest, err := ociimage.Write(f, cfg)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("write %s: %w", *out, cerr)
	}
	if err != nil {
		_ = os.Remove(*out)
		return err
	}
	fmt.Println(digest)
	return nil
}
