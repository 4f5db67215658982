package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// cookieName is the session cookie; its value is cookieValue.
const cookieName = "dlq_session"

// csrfField is the form field (and csrfHeader the header htmx sends)
// carrying the CSRF token.
const (
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

// session is a signed-in request's context: who it is and its CSRF token.
type session struct {
	principal auth.Principal
	idHash    []byte
	csrf      string
	// flashKey signs the session's flashes (flash.go); flash is the one
	// this page request brought, taken from its cookie.
	flashKey []byte
	flash    *flash
}

type ctxKey int

const sessionKey ctxKey = 0

func sessionFrom(ctx context.Context) *session {
	s, _ := ctx.Value(sessionKey).(*session)
	return s
}

// newSessionID returns 32 random bytes, base64url: the cookie's value.
func newSessionID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("console: session id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// hashID is what the database keeps of a session id.
func hashID(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

// csrfToken derives the session's CSRF token from its id: only the
// holder of the cookie can know it, every instance computes the same one,
// and it reveals nothing about the id (HMAC keyed by the id).
func csrfToken(id string) string {
	m := hmac.New(sha256.New, []byte(id))
	m.Write([]byte("dlq console csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// cookieValue is what the browser keeps: the session id and a MAC of it
// keyed by the digest of the token it signed in with. The database row
// names the token only; a session whose MAC no longer verifies was made
// with a secret the token no longer has (rotated under the same name),
// and ends. Without it a token's sessions outlived its rotation.
func cookieValue(id string, tokenDigest [sha256.Size]byte) string {
	return id + "." + sessionMAC(id, tokenDigest)
}

func sessionMAC(id string, tokenDigest [sha256.Size]byte) string {
	m := hmac.New(sha256.New, tokenDigest[:])
	m.Write([]byte("dlq console session\x00"))
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// validSessionID reports whether s has the shape of an id newSessionID
// makes, so garbage never reaches the database.
func validSessionID(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 32
}

// resolve finds the request's session: the cookie's id, its row (not
// expired), and its token's principal as the configuration has it now.
// nil when the request is not signed in.
func (c *Console) resolve(r *http.Request) (*session, error) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return nil, nil
	}
	id, mac, _ := strings.Cut(ck.Value, ".")
	if !validSessionID(id) {
		return nil, nil
	}
	h := hashID(id)
	row, err := c.cfg.Sessions.GetConsoleSession(r.Context(), h)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, ok := c.cfg.Auth.Lookup(row.TokenName)
	digest, _ := c.cfg.Auth.TokenDigest(row.TokenName)
	if !ok || !hmac.Equal([]byte(mac), []byte(sessionMAC(id, digest))) {
		// The token was removed from the configuration, or given a new
		// secret: so is its session.
		if err := c.cfg.Sessions.DeleteConsoleSession(r.Context(), h); err != nil {
			c.log.Warn("delete the session of a removed or rotated token", "token", row.TokenName, "error", err)
		}
		return nil, nil
	}
	return &session{principal: p, idHash: h, csrf: csrfToken(id), flashKey: flashKey(id)}, nil
}

// withSession resolves the session, applies the token's rate limit and
// calls next with the session in the context; without one it calls
// anonymous.
func (c *Console) withSession(w http.ResponseWriter, r *http.Request, next http.HandlerFunc, anonymous func()) {
	s, err := c.resolve(r)
	if err != nil {
		c.renderError(w, r, nil, http.StatusInternalServerError, c.internal(r, "read the session", err))
		return
	}
	if s == nil {
		anonymous()
		return
	}
	if !c.cfg.Auth.Allow(s.principal) {
		w.Header().Set("Retry-After", "1")
		c.renderError(w, r, s, http.StatusTooManyRequests, "Too many requests for token "+s.principal.Name+"; slow down.")
		return
	}
	next(w, r.WithContext(context.WithValue(r.Context(), sessionKey, s)))
}

// page wraps a GET page: without a session it sends the browser to the
// sign-in form, which brings it back here afterwards.
func (c *Console) page(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.withSession(w, r, c.withFlash(next), func() {
			if r.Header.Get("HX-Request") == "true" || isRefresh(r) {
				// A poll whose session ended: static/app.js sees the 401
				// and goes to the sign-in form.
				c.renderError(w, r, nil, http.StatusUnauthorized, "Signed out.")
				return
			}
			http.Redirect(w, r, "/ui/?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		})
	})
}

// action wraps a state-changing POST: it needs a session, a request from
// the console's own origin, and the session's CSRF token; anything else
// is a 403 that changes nothing.
func (c *Console) action(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		c.withSession(w, r, func(w http.ResponseWriter, r *http.Request) {
			s := sessionFrom(r.Context())
			if !sameOrigin(r) {
				c.renderError(w, r, s, http.StatusForbidden, "Refused: the request did not come from this console.")
				return
			}
			if err := r.ParseForm(); err != nil {
				c.renderError(w, r, s, http.StatusBadRequest, "The form could not be read: "+err.Error())
				return
			}
			got := r.PostForm.Get(csrfField)
			if got == "" {
				got = r.Header.Get(csrfHeader)
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) != 1 {
				c.renderError(w, r, s, http.StatusForbidden, "Refused: the form's security token is missing or wrong. Reload the page and try again.")
				return
			}
			next(w, r)
		}, func() {
			c.renderError(w, r, nil, http.StatusForbidden, "Refused: you are not signed in.")
		})
	})
}

// withFlash gives a signed-in page the flash an action left for it,
// shown once (not to htmx's fragment requests, whose pages keep it).
func (c *Console) withFlash(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("HX-Request") != "true" {
			s := sessionFrom(r.Context())
			s.flash = c.takeFlash(w, r, s)
		}
		next(w, r)
	}
}

// maxFormBytes bounds a form: a few thousand ids and the filter fields.
const maxFormBytes = 1 << 20

// sameOrigin reports whether a POST comes from a page of this host. The
// SameSite=Strict cookie and the CSRF token already refuse other sites;
// this also covers the sign-in form, which has no session yet. Browsers
// send Origin on every POST (the page's own under Referrer-Policy
// same-origin; "null" from an opaque origin, which is refused); a request
// without one is not a browser's cross-site request, so it is let through
// to the token check.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// handleRoot is the overview when signed in, the sign-in form otherwise.
func (c *Console) handleRoot(w http.ResponseWriter, r *http.Request) {
	c.withSession(w, r, c.withFlash(c.handleOverview), func() {
		c.renderSignIn(w, r, http.StatusOK, "")
	})
}

// signInData is the sign-in form's data.
type signInData struct {
	Next  string
	Error string
}

func (c *Console) renderSignIn(w http.ResponseWriter, r *http.Request, status int, msg string) {
	next := safeNext(r.FormValue("next"))
	c.render(w, r, status, "signin", nil, "Sign in", signInData{Next: next, Error: msg})
}

// safeNext keeps a return address only if it is a console page, so the
// sign-in form cannot be made to send anyone elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "/ui//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	return next
}

// handleSignIn checks a token exactly as the API does (the same
// authenticator and wrong-token throttle) and starts a session.
func (c *Console) handleSignIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if !sameOrigin(r) {
		c.renderError(w, r, nil, http.StatusForbidden, "Refused: the request did not come from this console.")
		return
	}
	if err := r.ParseForm(); err != nil {
		c.renderSignIn(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	p, err := c.cfg.Auth.AuthenticateFrom(clientAddr(r), strings.TrimSpace(r.PostForm.Get("token")))
	var te *auth.ThrottledError
	switch {
	case errors.As(err, &te):
		c.signIns.WithLabelValues("throttled").Inc()
		secs := max(1, int((te.RetryAfter+time.Second-1)/time.Second))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		c.renderSignIn(w, r, http.StatusTooManyRequests, fmt.Sprintf("Too many wrong tokens from this address; try again in %d s.", secs))
		return
	case err != nil:
		c.signIns.WithLabelValues("invalid_token").Inc()
		c.renderSignIn(w, r, http.StatusUnauthorized, "That token is not valid.")
		return
	}
	id, err := newSessionID()
	if err == nil {
		err = c.cfg.Sessions.CreateConsoleSession(r.Context(), hashID(id), p.Name, time.Now().Add(c.cfg.SessionTTL))
	}
	digest, _ := c.cfg.Auth.TokenDigest(p.Name)
	if err != nil {
		c.renderError(w, r, nil, http.StatusInternalServerError, c.internal(r, "start a session", err))
		return
	}
	c.signIns.WithLabelValues("ok").Inc()
	c.log.Info("console sign-in", "token", p.Name, "request_id", c.cfg.RequestID(r.Context()))
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: cookieValue(id, digest), Path: "/ui/",
		MaxAge: int(c.cfg.SessionTTL / time.Second), Expires: time.Now().Add(c.cfg.SessionTTL),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}

// handleSignOut ends the session in the database (on every instance) and
// in the browser.
func (c *Console) handleSignOut(w http.ResponseWriter, r *http.Request) {
	s := sessionFrom(r.Context())
	if err := c.cfg.Sessions.DeleteConsoleSession(r.Context(), s.idHash); err != nil {
		c.renderError(w, r, s, http.StatusInternalServerError, c.internal(r, "end the session", err))
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: "", Path: "/ui/", MaxAge: -1, Expires: time.Unix(0, 0),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// clientAddr is the TCP peer, as the API counts wrong tokens by it.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// caller is the signed-in principal acting through the console.
// renderUnrouted writes the error page of a request that matched no route
// (so went through no session middleware): it reads the session itself,
// so that a signed-in user keeps the navigation; an unreadable one shows
// the page as to a visitor.
func (c *Console) renderUnrouted(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s, _ := c.resolve(r)
	if s != nil {
		r = r.WithContext(context.WithValue(r.Context(), sessionKey, s))
	}
	c.renderError(w, r, s, status, msg)
}

func (c *Console) caller(r *http.Request) ops.Caller {
	return ops.Caller{Principal: sessionFrom(r.Context()).principal, Via: ops.ViaConsole, RequestID: c.cfg.RequestID(r.Context())}
}

// internal logs an unexpected failure and returns what the page says.
func (c *Console) internal(r *http.Request, what string, err error) string {
	id := c.cfg.RequestID(r.Context())
	c.log.Error("console: "+what, "error", err, "request_id", id)
	return "Could not " + what + " (an internal error; request id " + id + " in the server log)."
}
