package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/internal/tlsconf"
	"github.com/dlq/dlq/store"
)

// encryption reads the keys: the ring, and the store's sealing. Both nil
// when no key is configured (encryption off).
func encryption(cfg config.Config) (*crypt.Ring, *store.Encryption, error) {
	keys, err := cfg.EncryptionKeys()
	if errors.Is(err, crypt.ErrNoKeys) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	ring, err := crypt.NewRing(keys)
	if err != nil {
		return nil, nil, err
	}
	return ring, &store.Encryption{Ring: ring, SealHeader: cfg.SealHeader()}, nil
}

// checkKeys refuses to start without a key that still wraps data, unless
// allowed (a key lost for good: its rows stay flagged and unreadable).
func checkKeys(ctx context.Context, cfg config.Config, st *store.Store, ring *crypt.Ring, log *slog.Logger) error {
	var ids []string
	if ring != nil {
		ids = ring.KeyIDs()
		log.Info("encryption at rest on", "active_key", ring.Active(), "keys", ids)
	}
	err := st.CheckKeysWhenReachable(ctx, ids)
	if err == nil && ring != nil {
		if err = st.PrepareSealing(ctx); errors.Is(err, crypt.ErrTampered) {
			return fmt.Errorf("%w: a configured key does not open what it wrapped: is a key id given with another key's secret?", err)
		}
		return err
	}
	var missing *store.MissingKeysError
	if errors.As(err, &missing) && cfg.Encryption.AllowMissingKeys {
		for _, u := range missing.Uses {
			if u.Index {
				return fmt.Errorf("%w; the index key is wrapped by key %s: without it dlq can neither store nor search, so encryption.allow_missing_keys cannot apply", err, u.KeyID)
			}
		}
		log.Error("starting without encryption keys that still wrap data (encryption.allow_missing_keys): those rows are flagged and cannot be read or replayed",
			"error", err)
		if ring != nil {
			return st.PrepareSealing(ctx)
		}
		return nil
	}
	return err
}

// serverTLS is the HTTP API's TLS configuration, nil without a
// certificate. Its certificate is read again when the files change and on
// SIGHUP, until ctx ends.
func serverTLS(ctx context.Context, cfg config.Config, log *slog.Logger) (*tls.Config, error) {
	if !cfg.TLS.Enabled() {
		return nil, nil
	}
	r, err := tlsconf.NewReloader(cfg.TLS.CertFile, cfg.TLS.KeyFile, log)
	if err != nil {
		return nil, err
	}
	go r.Watch(ctx, cfg.TLS.ReloadInterval.D())
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reading the TLS certificate again")
				_ = r.Reload()
			}
		}
	}()
	return r.ServerConfig(), nil
}
