package tlsconf

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/proctest"
)

// selfSigned writes a self-signed certificate for localhost with serial
// sn into dir, and returns the file names.
func selfSigned(t *testing.T, dir string, sn int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(sn), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	// Written next to the files and renamed over them, as tools replace
	// certificates.
	require.NoError(t, os.WriteFile(certFile+".new", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(keyFile+".new", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	require.NoError(t, os.Rename(keyFile+".new", keyFile))
	require.NoError(t, os.Rename(certFile+".new", certFile))
	return certFile, keyFile
}

func served(t *testing.T, r *Reloader) int64 {
	t.Helper()
	c, err := r.GetCertificate(nil)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	require.NoError(t, err)
	return leaf.SerialNumber.Int64()
}

func TestReloaderWatchesItsFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir, 1)
	// The watcher logs from its goroutine while the test reads.
	var logs proctest.LockedBuffer
	r, err := NewReloader(certFile, keyFile, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	require.Equal(t, int64(1), served(t, r))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Watch(ctx, 20*time.Millisecond)

	// A file's modification time has a coarse grain on some file systems:
	// the size differs too (another serial), which the watcher also sees.
	selfSigned(t, dir, 1<<40)
	require.Eventually(t, func() bool { return served(t, r) == 1<<40 }, 10*time.Second, 20*time.Millisecond)

	// A broken pair keeps the certificate in use, and says so.
	require.NoError(t, os.WriteFile(keyFile, []byte("garbage"), 0o600))
	require.Error(t, r.Reload())
	require.Equal(t, int64(1<<40), served(t, r))
	require.Contains(t, logs.String(), "TLS certificate not reloaded")

	_, err = NewReloader(certFile, "", nil)
	require.Error(t, err)
	_, err = NewReloader(certFile, keyFile, nil)
	require.Error(t, err, "a bad pair fails at start")
}

func TestClientConfigAndExplain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir, 7)
	cfg, err := Client{CAFile: certFile, CertFile: certFile, KeyFile: keyFile, ServerName: "localhost"}.Config()
	require.NoError(t, err)
	require.Equal(t, "localhost", cfg.ServerName)
	require.Len(t, cfg.Certificates, 1)
	_, err = Client{CertFile: certFile}.Config()
	require.ErrorContains(t, err, "both")
	_, err = Client{CAFile: keyFile}.Config()
	require.ErrorContains(t, err, "holds no PEM certificate")
	require.True(t, Client{}.IsZero())

	// A server with that certificate, and clients that do not trust it or
	// dial it by another name.
	r, err := NewReloader(certFile, keyFile, nil)
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig())
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	_, err = tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "localhost"})
	why, ok := Explain(err, "the CA setting")
	require.True(t, ok, "%v", err)
	require.Contains(t, why, "not signed by a CA dlq trusts: give the CA that signed it in the CA setting")
	_, err = tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "example.org", RootCAs: cfg.RootCAs})
	why, ok = Explain(err, "x")
	require.True(t, ok, "%v", err)
	require.Contains(t, why, "not for the name dlq dialled")
	_, ok = Explain(os.ErrNotExist, "x")
	require.False(t, ok)
	_, ok = Explain(nil, "x")
	require.False(t, ok)
}
