// Package ociimage writes dlq's container image as an OCI image archive
// (an image layout in one tar: oci-layout, index.json, blobs/sha256/…),
// without a container engine: `make release` runs where no Docker daemon
// does, and the archive loads into one later (`docker load`, `podman
// load`, `skopeo copy oci-archive:…`).
//
// The image is the static dlq binary on an otherwise empty root: the
// binary, CA certificates (for amqps and verify-full PostgreSQL), an
// /etc/passwd naming the unprivileged user it runs as, and /tmp. Time
// zones come from the binary (built with -tags timetzdata). One image per
// platform, under one image index named by the release version.
//
// The archive is reproducible: every timestamp is Config.Created, owners
// are 0, entries are sorted, gzip carries no name or time. Building the
// same binaries twice gives the same bytes, so the digest identifies the
// release.
package ociimage

import (
	"archive/tar"
	"bytes"
	"cmp"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"time"
)

// Media types of the OCI image specification.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// The user the image runs as: not root, and the same id the distroless
// images use, so volumes prepared for those fit this one.
const (
	userID   = 65532
	userName = "nonroot"
)

// Platform is one binary of the image.
type Platform struct {
	// Architecture is GOARCH (amd64, arm64). Required.
	Architecture string
	// Binary is the static dlq executable for it. Required.
	Binary []byte
}

// Config describes the image.
type Config struct {
	// Version is the release (VERSION), the image's reference name. Required.
	Version string
	// Revision is the commit the binaries were built from. Optional.
	Revision string
	// Created stamps every file and the image config. Required: a fixed
	// time (the commit's) keeps the archive reproducible.
	Created time.Time
	// CACertificates is a PEM bundle placed at
	// /etc/ssl/certs/ca-certificates.crt. Optional; without it the image
	// trusts only certificates given by configuration.
	CACertificates []byte
	// Platforms holds one binary per architecture. Required.
	Platforms []Platform
}

func (c Config) validate() error {
	var errs []error
	if c.Version == "" {
		errs = append(errs, errors.New("ociimage: Version is required"))
	}
	if c.Created.IsZero() {
		errs = append(errs, errors.New("ociimage: Created is required (a fixed time keeps the archive reproducible)"))
	}
	if len(c.Platforms) == 0 {
		errs = append(errs, errors.New("ociimage: Platforms needs at least one binary"))
	}
	seen := map[string]bool{}
	for i, p := range c.Platforms {
		switch {
		case p.Architecture == "":
			errs = append(errs, fmt.Errorf("ociimage: Platforms[%d].Architecture is required", i))
		case seen[p.Architecture]:
			errs = append(errs, fmt.Errorf("ociimage: Platforms[%d]: architecture %s given twice", i, p.Architecture))
		}
		seen[p.Architecture] = true
		if len(p.Binary) == 0 {
			errs = append(errs, fmt.Errorf("ociimage: Platforms[%d] (%s): Binary is empty", i, p.Architecture))
		}
	}
	return errors.Join(errs...)
}

// Descriptor points at a blob (OCI descriptor).
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *PlatformSpec     `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PlatformSpec is a descriptor's platform.
type PlatformSpec struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Index is an OCI image index (index.json, and the release's index blob).
type Index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []Descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// Manifest is an OCI image manifest.
type Manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        Descriptor        `json:"config"`
	Layers        []Descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// ImageConfig is an OCI image configuration.
type ImageConfig struct {
	Created      string    `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       RunConfig `json:"config"`
	RootFS       RootFS    `json:"rootfs"`
	History      []History `json:"history"`
}

// RunConfig is how the image runs.
type RunConfig struct {
	User         string              `json:"User"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	Env          []string            `json:"Env"`
	Entrypoint   []string            `json:"Entrypoint"`
	Cmd          []string            `json:"Cmd"`
	WorkingDir   string              `json:"WorkingDir"`
	Labels       map[string]string   `json:"Labels"`
}

// RootFS lists the layers by the digests of their uncompressed tars.
type RootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

// History records what made a layer.
type History struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// layout collects the blobs of an image layout.
type layout struct {
	blobs map[string][]byte // by digest
}

func (l *layout) add(mediaType string, data []byte) Descriptor {
	sum := sha256.Sum256(data)
	d := "sha256:" + hex.EncodeToString(sum[:])
	l.blobs[d] = data
	return Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
}

func (l *layout) addJSON(mediaType string, v any) (Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Descriptor{}, fmt.Errorf("ociimage: encode %s: %w", mediaType, err)
	}
	return l.add(mediaType, b), nil
}

// Write writes the image archive of cfg to w and returns the digest of the
// release's image index (what `docker buildx imagetools inspect` and
// registries show).
func Write(w io.Writer, cfg Config) (string, error) {
	if err := cfg.validate(); err != nil {
		return "", err
	}
	created := cfg.Created.UTC().Format(time.RFC3339)
	annotations := map[string]string{
		"org.opencontainers.image.version": cfg.Version,
		"org.opencontainers.image.title":   "dlq",
		"org.opencontainers.image.created": created,
	}
	if cfg.Revision != "" {
		annotations["org.opencontainers.image.revision"] = cfg.Revision
	}
	l := &layout{blobs: map[string][]byte{}}
	var manifests []Descriptor
	for _, p := range cfg.Platforms {
		m, err := l.image(cfg, p, annotations)
		if err != nil {
			return "", fmt.Errorf("ociimage: %s image: %w", p.Architecture, err)
		}
		manifests = append(manifests, m)
	}
	release, err := l.addJSON(MediaTypeIndex, Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: manifests, Annotations: annotations})
	if err != nil {
		return "", err
	}
	release.Annotations = map[string]string{
		"org.opencontainers.image.ref.name": cfg.Version,
		// The name an engine loading the archive gives the image
		// (containerd and Docker read this one; the ref name is only a tag).
		"io.containerd.image.name": "docker.io/library/dlq:" + cfg.Version,
	}
	top, err := json.Marshal(Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{release}})
	if err != nil {
		return "", fmt.Errorf("ociimage: encode index.json: %w", err)
	}
	files := map[string][]byte{
		"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json": top,
	}
	for d, b := range l.blobs {
		files["blobs/sha256/"+d[len("sha256:"):]] = b
	}
	if err := writeTar(w, files, cfg.Created); err != nil {
		return "", fmt.Errorf("ociimage: write the archive: %w", err)
	}
	return release.Digest, nil
}

// image adds one platform's layer, config and manifest.
func (l *layout) image(cfg Config, p Platform, annotations map[string]string) (Descriptor, error) {
	files := map[string][]byte{
		"dlq":        p.Binary,
		"etc/passwd": fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", userName, userID, userID, userName, userName),
		"etc/group":  fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", userName, userID),
	}
	if len(cfg.CACertificates) > 0 {
		files["etc/ssl/certs/ca-certificates.crt"] = cfg.CACertificates
	}
	var raw bytes.Buffer
	if err := writeRootFS(&raw, files, cfg.Created); err != nil {
		return Descriptor{}, fmt.Errorf("layer: %w", err)
	}
	diffSum := sha256.Sum256(raw.Bytes())
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return Descriptor{}, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return Descriptor{}, fmt.Errorf("compress the layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return Descriptor{}, fmt.Errorf("compress the layer: %w", err)
	}
	layer := l.add(MediaTypeLayer, gz.Bytes())
	created := cfg.Created.UTC().Format(time.RFC3339)
	labels := map[string]string{}
	for k, v := range annotations {
		labels[k] = v
	}
	config, err := l.addJSON(MediaTypeConfig, ImageConfig{
		Created:      created,
		Architecture: p.Architecture,
		OS:           "linux",
		Config: RunConfig{
			User:         fmt.Sprintf("%d:%d", userID, userID),
			ExposedPorts: map[string]struct{}{"8080/tcp": {}},
			// Inside a container the API must listen on the container's
			// interface to be reachable through a published port; dlq's
			// own default (127.0.0.1) suits a host install.
			Env:        []string{"DLQ_HTTP_ADDR=0.0.0.0:8080"},
			Entrypoint: []string{"/dlq"},
			Cmd:        []string{"serve"},
			WorkingDir: "/home/" + userName,
			Labels:     labels,
		},
		RootFS:  RootFS{Type: "layers", DiffIDs: []string{"sha256:" + hex.EncodeToString(diffSum[:])}},
		History: []History{{Created: created, CreatedBy: "dlq-release image " + cfg.Version}},
	})
	if err != nil {
		return Descriptor{}, err
	}
	m, err := l.addJSON(MediaTypeManifest, Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest, Config: config, Layers: []Descriptor{layer}, Annotations: annotations})
	if err != nil {
		return Descriptor{}, err
	}
	m.Platform = &PlatformSpec{Architecture: p.Architecture, OS: "linux"}
	return m, nil
}

// writeRootFS writes the image's file tree: the files, their parent
// directories, /tmp (sticky, world-writable) and the user's home.
func writeRootFS(w io.Writer, files map[string][]byte, mtime time.Time) error {
	dirs := map[string]int64{"tmp": 0o1777, "home": 0o755, "home/" + userName: 0o700}
	for name := range files {
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	tw := tar.NewWriter(w)
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: dirs[d], ModTime: mtime, Format: tar.FormatPAX}
		if d == "home/"+userName {
			h.Uid, h.Gid = userID, userID
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		mode := int64(0o644)
		if name == "dlq" {
			mode = 0o755
		}
		if err := writeFile(tw, name, files[name], mode, mtime); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeTar writes files (the image layout) as a plain tar, sorted.
func writeTar(w io.Writer, files map[string][]byte, mtime time.Time) error {
	tw := tar.NewWriter(w)
	names := slices.SortedFunc(maps.Keys(files), func(a, b string) int {
		// oci-layout first, then index.json, then the blobs: readers that
		// stream the archive find the layout's marker before anything else.
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b))
	})
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	for _, n := range names {
		if err := writeFile(tw, n, files[n], 0o644, mtime); err != nil {
			return err
		}
	}
	return tw.Close()
}

func rank(name string) int {
	switch name {
	case "oci-layout":
		return 0
	case "index.json":
		return 1
	}
	return 2
}

func writeFile(tw *tar.Writer, name string, data []byte, mode int64, mtime time.Time) error {
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
