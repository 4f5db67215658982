package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testConfig() Config {
	return Config{
		Version:        "1.2.3",
		Revision:       "0123456789ab",
		Created:        time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC),
		CACertificates: []byte("-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n"),
		Platforms: []Platform{
			{Architecture: "amd64", Binary: []byte("\x7fELF amd64 binary")},
			{Architecture: "arm64", Binary: []byte("\x7fELF arm64 binary")},
		},
	}
}

// readTar returns a tar's regular files by name.
func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		require.NoError(t, err)
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		files[h.Name] = b
	}
}

func blob(t *testing.T, files map[string][]byte, d Descriptor) []byte {
	t.Helper()
	hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
	require.True(t, ok, "digest %q", d.Digest)
	b, ok := files["blobs/sha256/"+hexSum]
	require.True(t, ok, "blob %s missing", d.Digest)
	sum := sha256.Sum256(b)
	require.Equal(t, hexSum, hex.EncodeToString(sum[:]), "blob content does not match its digest")
	require.EqualValues(t, len(b), d.Size, "descriptor size of %s", d.Digest)
	return b
}

// TestArchiveIsAValidImageLayout walks the archive as a loader does: the
// layout marker, index.json, the release's index named by the version,
// each platform's manifest, config and layer, every digest and size
// checked, and the layer's files.
func TestArchiveIsAValidImageLayout(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	var buf bytes.Buffer
	digest, err := Write(&buf, cfg)
	require.NoError(t, err)
	files := readTar(t, &buf)
	require.JSONEq(t, `{"imageLayoutVersion":"1.0.0"}`, string(files["oci-layout"]))

	var top Index
	require.NoError(t, json.Unmarshal(files["index.json"], &top))
	require.Len(t, top.Manifests, 1)
	require.Equal(t, MediaTypeIndex, top.Manifests[0].MediaType)
	require.Equal(t, "1.2.3", top.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	require.Equal(t, digest, top.Manifests[0].Digest)

	var release Index
	require.NoError(t, json.Unmarshal(blob(t, files, top.Manifests[0]), &release))
	require.Len(t, release.Manifests, 2)
	for i, arch := range []string{"amd64", "arm64"} {
		md := release.Manifests[i]
		require.Equal(t, MediaTypeManifest, md.MediaType)
		require.Equal(t, &PlatformSpec{Architecture: arch, OS: "linux"}, md.Platform)
		var m Manifest
		require.NoError(t, json.Unmarshal(blob(t, files, md), &m))
		require.Equal(t, "1.2.3", m.Annotations["org.opencontainers.image.version"])
		require.Equal(t, "0123456789ab", m.Annotations["org.opencontainers.image.revision"])

		var c ImageConfig
		require.NoError(t, json.Unmarshal(blob(t, files, m.Config), &c))
		require.Equal(t, arch, c.Architecture)
		require.Equal(t, "linux", c.OS)
		require.Equal(t, []string{"/dlq"}, c.Config.Entrypoint)
		require.Equal(t, []string{"serve"}, c.Config.Cmd)
		require.Equal(t, "65532:65532", c.Config.User)
		require.Equal(t, "2026-11-28T12:00:00Z", c.Created)

		require.Len(t, m.Layers, 1)
		require.Equal(t, MediaTypeLayer, m.Layers[0].MediaType)
		zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, m.Layers[0])))
		require.NoError(t, err)
		raw, err := io.ReadAll(zr)
		require.NoError(t, err)
		sum := sha256.Sum256(raw)
		require.Equal(t, []string{"sha256:" + hex.EncodeToString(sum[:])}, c.RootFS.DiffIDs, "diff_id is the uncompressed layer's digest")

		layer := readTar(t, bytes.NewReader(raw))
		require.Equal(t, cfg.Platforms[i].Binary, layer["dlq"])
		require.Equal(t, cfg.CACertificates, layer["etc/ssl/certs/ca-certificates.crt"])
		require.Contains(t, string(layer["etc/passwd"]), "nonroot:x:65532:65532:")
	}
}

// TestArchiveIsReproducible: the same inputs give the same bytes, so the
// release's digest names its content; another binary gives another digest.
func TestArchiveIsReproducible(t *testing.T) {
	t.Parallel()
	var a, b bytes.Buffer
	da, err := Write(&a, testConfig())
	require.NoError(t, err)
	db, err := Write(&b, testConfig())
	require.NoError(t, err)
	require.Equal(t, da, db)
	require.True(t, bytes.Equal(a.Bytes(), b.Bytes()), "two builds of the same image differ")

	other := testConfig()
	other.Platforms[1].Binary = []byte("\x7fELF another arm64 binary")
	var c bytes.Buffer
	dc, err := Write(&c, other)
	require.NoError(t, err)
	require.NotEqual(t, da, dc)
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	_, err := Write(io.Discard, Config{Platforms: []Platform{{Architecture: "amd64"}, {Architecture: "amd64", Binary: []byte{1}}}})
	require.Error(t, err)
	for _, want := range []string{"Version is required", "Created is required", "Platforms[0] (amd64): Binary is empty", "Platforms[1]: architecture amd64 given twice"} {
		require.ErrorContains(t, err, want)
	}
}

// TestSkopeoReadsTheArchive: where skopeo is installed, an independent
// reader of OCI archives must accept ours.
func TestSkopeoReadsTheArchive(t *testing.T) {
	t.Parallel()
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		t.Skip("skopeo is not installed (Debian package skopeo); the layout is checked by the tests above")
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(path)
	require.NoError(t, err)
	_, err = Write(f, testConfig())
	require.NoError(t, err)
	require.NoError(t, f.Close())
	out, err := exec.Command(skopeo, "inspect", "--override-arch", "arm64", "oci-archive:"+path+":1.2.3").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var info struct {
		Architecture string
		Labels       map[string]string
	}
	require.NoError(t, json.Unmarshal(out, &info), "%s", out)
	require.Equal(t, "arm64", info.Architecture)
	require.Equal(t, "1.2.3", info.Labels["org.opencontainers.image.version"])
}
