package api_test

import (
	"slices"
	"sort"
	"testing"

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
