package broker

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dialFiltered dials like amqp.DialConfig with a frameFilter between the
// socket and amqp091-go, and a coalescingConn over both that gathers the
// writes. For amqps it does the TLS handshake itself, so the filter reads
// plain frames, with cfg.TLSClientConfig, or else the URL's own TLS
// parameters (cacertfile, certfile, keyfile, server_name_indication),
// read here as amqp091-go would. The filter keeps the tables it replaces
// in tables.
func dialFiltered(rawURL string, cfg amqp.Config, tables *undecodableTables, raw *rawConfig) (*amqp.Connection, error) {
	uri, err := amqp.ParseURI(rawURL)
	if err != nil {
		return nil, err
	}
	timeout := 30 * time.Second
	if uri.ConnectionTimeout > 0 {
		timeout = time.Duration(uri.ConnectionTimeout) * time.Millisecond
	}
	var tlsCfg *tls.Config
	dialURL := rawURL
	if uri.Scheme == "amqps" {
		if tlsCfg, err = uriTLS(uri, cfg.TLSClientConfig); err != nil {
			return nil, err
		}
		cfg.TLSClientConfig = nil
		// amqp091-go must not wrap the connection in TLS a second time:
		// it gets an amqp:// URL with the amqps port spelt out, and the
		// rest of the URL (vhost, query parameters) as it was.
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, err
		}
		u.Scheme = "amqp"
		u.Host = net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
		dialURL = u.String()
	}
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		// The handshake has a deadline; amqp091-go clears it once open.
		if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
			_ = c.Close()
			return nil, err
		}
		if tlsCfg != nil {
			tc := tls.Client(c, tlsCfg)
			if err := tc.Handshake(); err != nil {
				_ = c.Close()
				return nil, err
			}
			c = tc
		}
		return newCoalescingConn(newFrameFilter(c, tables, raw.forDial(cfg.FrameSize)), coalesceDelay), nil
	}
	return amqp.DialConfig(dialURL, cfg)
}

// uriTLS is the TLS configuration of an amqps connection: base (cloned),
// or the URL's parameters; the server name defaults to the URL's host.
func uriTLS(uri amqp.URI, base *tls.Config) (*tls.Config, error) {
	if base != nil {
		c := base.Clone()
		if c.ServerName == "" {
			c.ServerName = uri.Host
		}
		return c, nil
	}
	c := &tls.Config{ServerName: cmp.Or(uri.ServerName, uri.Host), MinVersion: tls.VersionTLS12}
	if uri.CACertFile != "" {
		pem, err := os.ReadFile(uri.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("broker: cacertfile: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("broker: cacertfile %s holds no PEM certificate", uri.CACertFile)
		}
	}
	if uri.CertFile != "" || uri.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(uri.CertFile, uri.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("broker: certfile and keyfile: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
