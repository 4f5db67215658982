// Package console is dlq's web console: server-rendered pages under /ui/
// on the API's port, for on-call engineers who start in a browser.
//
// It is a front door like the HTTP API and the control queue: each handler
// decodes a form or a query, calls the operations layer (Ops, implemented
// by *ops.Service) with the signed-in principal, and renders the answer.
// It never decides who may do what: controls are hidden when
// ops.Authorize says no, and the layer refuses a forged request anyway.
//
// Sign-in takes the same tokens as the API (auth.Authenticator, with its
// wrong-token throttle) and starts a server-side session: a random id in
// a cookie (HttpOnly, SameSite=Strict, Secure under TLS, Path=/ui/), of
// which PostgreSQL keeps only the SHA-256 and the token's name, so that
// every instance behind a load balancer shares it and a token removed
// from the configuration ends its sessions on the next request. Every
// state-changing request carries a CSRF token derived from the session id
// and is compared in constant time.
//
// Every response carries a strict Content-Security-Policy (scripts and
// styles from 'self' only, no inline script, no framing), so a hostile
// message body or header cannot run script: html/template escapes every
// value, and the policy stops anything that slipped through. The only
// script is the vendored htmx (static/vendor, pinned) and static/app.js;
// both are embedded, nothing is fetched at run time.
//
// Pages never count dead_messages: counts come from the summary and group
// tables, and listings are keyset pages (docs/CONSOLE.md).
package console
