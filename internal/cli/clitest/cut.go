package clitest

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// CuttingProxy forwards requests to upstream and cuts each answer after
// its first keep lines and a few bytes of the next, dropping the
// connection: an export cut short, as a failing network cuts it.
func CuttingProxy(t *testing.T, upstream string, keep int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header.Set("Authorization", r.Header.Get("Authorization"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		br := bufio.NewReader(resp.Body)
		for range keep {
			line, _ := br.ReadBytes('\n')
			_, _ = w.Write(line)
		}
		part := make([]byte, 10)
		n, _ := io.ReadFull(br, part)
		_, _ = w.Write(part[:n])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
