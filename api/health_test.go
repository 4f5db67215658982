package api_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
)

// /readyz names each check; a passing check may carry a detail (the
// database's replication is asynchronous) that never makes dlq unready,
// and a failing check shows its error instead.
func TestReadyzDetails(t *testing.T) {
	t.Parallel()
	const async = "replication: asynchronous to s1 (async)"
	detail := func(context.Context) string { return async }
	ok := func(context.Context) error { return nil }
	type check struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Error  string `json:"error"`
		Detail string `json:"detail"`
	}
	type ready struct {
		Status string  `json:"status"`
		Checks []check `json:"checks"`
	}

	b := setup(t, func(o *setupOpts) {
		o.checks = []api.Check{{Name: "postgres", Check: ok, Detail: detail}, {Name: "rabbitmq", Check: ok}}
	})
	r := b.do(t, "GET", "/readyz", "", nil)
	require.Equal(t, http.StatusOK, r.status)
	var got ready
	r.json(t, &got)
	require.Equal(t, ready{Status: "ready", Checks: []check{{Name: "postgres", OK: true, Detail: async}, {Name: "rabbitmq", OK: true}}}, got)

	b = setup(t, func(o *setupOpts) {
		o.checks = []api.Check{{Name: "postgres", Check: func(context.Context) error { return errors.New("store: ping: refused") }, Detail: detail}}
	})
	r = b.do(t, "GET", "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	got = ready{}
	r.json(t, &got)
	require.Equal(t, ready{Status: "not ready", Checks: []check{{Name: "postgres", Error: "store: ping: refused"}}}, got)
}
