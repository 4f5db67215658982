package api

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the API's OpenAPI 3 document. Tests check real responses
// against it, so it cannot drift from the handlers unnoticed.
//
//go:embed openapi.yaml
var OpenAPI []byte

// handleOpenAPI serves GET /api/v1/openapi.yaml.
func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(OpenAPI)
}
