package api_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
)

// productRoutes are the routes PRODUCT.md ("The public contract") and
// issue 4 name. They are the public contract: none may go missing.
var productRoutes = []string{
	"GET /api/v1/messages",
	"GET /api/v1/messages/{id}",
	"POST /api/v1/replays",
	"GET /api/v1/replays/{id}",
	"POST /api/v1/replays/{id}/cancel",
	"POST /api/v1/messages/acknowledge",
	"POST /api/v1/messages/delete",
	"DELETE /api/v1/messages/{id}",
	"GET /api/v1/stats",
	"GET /api/v1/status",
	"GET /api/v1/alerts",
	"GET /api/v1/audit",
	"GET /api/v1/groups",
	"GET /api/v1/openapi.yaml",
	"GET /healthz",
	"GET /readyz",
	"GET /metrics",
}

// TestRoutesMatchOpenAPI holds the route table and api/openapi.yaml to
// each other: the same paths and methods, the same query parameters, a
// request body exactly where one is taken, and no authentication exactly
// on the public routes. It also checks that every route of the product
// contract is served.
func TestRoutesMatchOpenAPI(t *testing.T) {
	t.Parallel()
	doc := openAPIDoc(t)
	table := map[string]api.Route{}
	for _, rt := range api.Routes() {
		require.NotContains(t, table, rt.Pattern(), "route %s is in the table twice", rt.Pattern())
		table[rt.Pattern()] = rt
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			pattern := method + " " + path
			documented[pattern] = true
			rt, ok := table[pattern]
			require.True(t, ok, "openapi.yaml documents %s, which no route serves", pattern)

			var query []string
			for _, p := range slices.Concat(item.Parameters, op.Parameters) {
				if p.Value.In == "query" {
					query = append(query, p.Value.Name)
				}
			}
			sort.Strings(query)
			want := slices.Clone(rt.Query)
			sort.Strings(want)
			require.Equal(t, want, query, "%s: query parameters of the route table vs openapi.yaml", pattern)
			require.Equal(t, rt.Body, op.RequestBody != nil, "%s: request body in the route table vs openapi.yaml", pattern)

			public := op.Security != nil && len(*op.Security) == 0
			require.Equal(t, rt.Role == "", public, "%s: public in the route table vs security in openapi.yaml", pattern)
			if rt.Role != "" {
				require.Contains(t, op.Summary, "("+rt.Role, "%s: the summary names the least role", pattern)
				require.Contains(t, op.Responses.Map(), "401", "%s documents 401", pattern)
				require.Contains(t, op.Responses.Map(), "429", "%s documents 429", pattern)
			}
			for _, status := range []string{"400", "500"} {
				require.Contains(t, op.Responses.Map(), status, "%s documents %s (unknown parameter; a panic)", pattern, status)
			}
		}
	}
	for pattern := range table {
		require.True(t, documented[pattern], "route %s is not in openapi.yaml", pattern)
	}
	for _, pattern := range productRoutes {
		require.Contains(t, table, pattern, "the product contract's route %s is not served", pattern)
	}
}

// TestServerOwnErrors pins the limitation docs/API.md states: requests
// Go's HTTP server refuses before any handler runs (a malformed request
// line, headers over 1 MiB) get its plain-text answer, without
// X-Request-Id. Should that change, the documentation must too.
func TestServerOwnErrors(t *testing.T) {
	t.Parallel()
	s, err := api.New(api.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	// dlq's own http.Server, not httptest's: its settings are the point.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	addr := ln.Addr().String()
	for name, c := range map[string]struct {
		request string
		status  int
	}{
		"malformed request line": {"NOT A REQUEST\r\n\r\n", http.StatusBadRequest},
		"headers too large":      {"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
	} {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		// The server may answer and close before reading everything.
		go func() { _, _ = conn.Write([]byte(c.request)) }()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, name)
		require.Equal(t, c.status, resp.StatusCode, name)
		require.Empty(t, resp.Header.Get("X-Request-Id"), name)
		resp.Body.Close()
		conn.Close()
	}
}
