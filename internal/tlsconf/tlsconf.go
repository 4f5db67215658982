// Package tlsconf builds dlq's TLS settings from files: the client side
// of its connections to RabbitMQ (amqps) and the server side of its HTTP
// API and console, whose certificate it reloads when the files change or
// on SIGHUP, without dropping a connection. It also words TLS failures
// so that an operator knows which setting to look at.
package tlsconf

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// Client is the client side of a TLS connection.
type Client struct {
	// CAFile holds the PEM certificates of the CAs to trust. Optional;
	// default the system's.
	CAFile string
	// CertFile and KeyFile are a client certificate and its key (PEM), for
	// servers that ask for one. Optional; both or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry.
	// Optional; default the host dialled.
	ServerName string
}

// IsZero reports whether nothing is set.
func (c Client) IsZero() bool { return c == Client{} }

// Config builds the tls.Config, reading the files now.
func (c Client) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("tls: a client certificate needs both its certificate file and its key file")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client certificate %s: %w", c.CertFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Explain words a TLS verification failure for an operator, naming the
// setting to look at; ok is false for any other error.
func Explain(err error, setting string) (string, bool) {
	if err == nil {
		return "", false
	}
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		alert    tls.AlertError
	)
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf("the server's certificate is not signed by a CA dlq trusts: give the CA that signed it in %s (%v)", setting, err), true
	case errors.As(err, &hostname):
		return fmt.Sprintf("the server's certificate is not for the name dlq dialled: connect by a name it carries, or set the server name in %s (%v)", setting, err), true
	case errors.As(err, &invalid):
		return fmt.Sprintf("the server's certificate is not valid (expired, not yet valid, or not for a server): %v", err), true
	case errors.As(err, &verify):
		return fmt.Sprintf("the server's certificate could not be verified (%s): %v", setting, err), true
	case errors.As(err, &alert), strings.Contains(err.Error(), "remote error: tls:"):
		// A server's alert arrives as text ("remote error: tls: ...").
		return fmt.Sprintf("the server refused the TLS handshake (a client certificate it does not accept, or none given?): %v", err), true
	}
	return "", false
}

// Reloader serves a certificate and key read from files, and reads them
// again when they change (Watch) or when asked (Reload, on SIGHUP). A
// failed reload keeps the certificate in use and says why.
type Reloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	certMod fileStamp
	keyMod  fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stamp(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{st.ModTime(), st.Size()}, nil
}

// NewReloader reads the certificate and key now: a bad pair fails at
// start.
func NewReloader(certFile, keyFile string, log *slog.Logger) (*Reloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: the server certificate needs both DLQ_TLS_CERT and DLQ_TLS_KEY")
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, log: cmp.Or(log, slog.Default()).With("component", "tls")}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again.
func (r *Reloader) Reload() error {
	cm, err1 := stamp(r.certFile)
	km, err2 := stamp(r.keyFile)
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err = errors.Join(err1, err2, err); err != nil {
		err = fmt.Errorf("tls: load certificate %s and key %s: %w", r.certFile, r.keyFile, err)
		r.mu.Lock()
		had := r.cert != nil
		r.mu.Unlock()
		if had {
			r.log.Error("TLS certificate not reloaded; the previous one stays in use", "error", err)
		}
		return err
	}
	r.mu.Lock()
	first := r.cert == nil
	r.cert, r.certMod, r.keyMod = &cert, cm, km
	r.mu.Unlock()
	if !first {
		r.log.Info("TLS certificate reloaded", "cert_file", r.certFile, "not_after", leafNotAfter(&cert))
	}
	return nil
}

func leafNotAfter(c *tls.Certificate) time.Time {
	if c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	if len(c.Certificate) > 0 {
		if leaf, err := x509.ParseCertificate(c.Certificate[0]); err == nil {
			return leaf.NotAfter
		}
	}
	return time.Time{}
}

// changed reports whether either file differs from what was loaded.
func (r *Reloader) changed() bool {
	cm, err1 := stamp(r.certFile)
	km, err2 := stamp(r.keyFile)
	if err1 != nil || err2 != nil {
		return false // being replaced; look again later
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return cm != r.certMod || km != r.keyMod
}

// Watch reloads whenever the files change, looking every interval, until
// ctx ends.
func (r *Reloader) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.changed() {
				_ = r.Reload()
			}
		}
	}
}

// GetCertificate is tls.Config.GetCertificate: the certificate in use.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}

// ServerConfig is a server tls.Config serving r's certificate.
func (r *Reloader) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}
