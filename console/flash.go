package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Every action ends with POST-redirect-GET: the action answers 303 to
// the page it came from, and what it did rides to that page in a flash
// cookie. The browser's Back then returns to pages fetched with GET, and
// never offers to send a form again.
//
// The cookie is signed with a key derived from the session id (which only
// the browser's session cookie and no server holds), so any dlq instance
// behind a load balancer reads it, no other session can plant one, and a
// flash outlives neither its session nor flashTTL. The page that shows it
// clears it; it never holds more than counts, ids and the layer's words.

// flashCookie is the flash's cookie.
const flashCookie = "dlq_flash"

// flashTTL bounds how long a flash waits for the page it is for.
const flashTTL = time.Minute

// Kinds of flash.
const (
	flashDone    = ""        // the action ran: "Done:"
	flashError   = "error"   // refused or failed: "Error:"
	flashWaiting = "waiting" // recorded, waiting for someone's approval: "Waiting:"
	// A replay recorded to start later (a delay): "Scheduled:", not "Done:",
	// since nothing has been published yet.
	flashScheduled = "scheduled"
	// A replay recorded that, as things stand, will publish nothing (every
	// message skipped, its target missing on the broker): "Note:", with
	// what it will do and what to do, never a green "Done:".
	flashNote = "note"
)

// flash is the result or error of an action, shown at the top of a page:
// its words, some of them links (a task to its page, a message to its
// page, an approval to the approvals page).
type flash struct {
	// Error marks a refusal or failure (shown with an icon and the word
	// "Error", not by colour alone). Kept for the pages that set it.
	Error bool
	// Kind is flashDone, flashError, flashWaiting, flashScheduled or
	// flashNote.
	Kind string
	// Text is the whole message when it has no Parts.
	Text  string
	Parts []flashPart
}

// flashPart is a piece of a flash: text, a link when Href is set.
type flashPart struct {
	Text string `json:"t"`
	Href string `json:"h,omitempty"`
}

// Label is the word that opens the flash.
func (f *flash) Label() string {
	switch {
	case f.Error || f.Kind == flashError:
		return "Error:"
	case f.Kind == flashWaiting:
		return "Waiting:"
	case f.Kind == flashScheduled:
		return "Scheduled:"
	case f.Kind == flashNote:
		return "Note:"
	}
	return "Done:"
}

// Class is the flash's style beside "flash": red for an error, amber for
// what waits or will not do what was asked, blue for what is to come.
func (f *flash) Class() string {
	switch {
	case f.IsError():
		return "flash-error"
	case f.Kind == flashWaiting || f.Kind == flashNote:
		return "flash-waiting"
	case f.Kind == flashScheduled:
		return "flash-scheduled"
	}
	return ""
}

// IsError reports a refusal or failure.
func (f *flash) IsError() bool { return f.Error || f.Kind == flashError }

// say builds a flash from pieces: strings are text, links are flashParts.
func say(kind string, pieces ...any) *flash {
	f := &flash{Kind: kind}
	for _, p := range pieces {
		switch v := p.(type) {
		case flashPart:
			f.Parts = append(f.Parts, v)
		case string:
			f.Parts = append(f.Parts, flashPart{Text: v})
		default:
			f.Parts = append(f.Parts, flashPart{Text: fmt.Sprint(v)})
		}
	}
	return f
}

// Links to what an action touched.
func taskLink(id int64) flashPart {
	return flashPart{Text: "replay " + strconv.FormatInt(id, 10), Href: "/ui/replays/" + strconv.FormatInt(id, 10)}
}

func messageLink(id int64) flashPart {
	return flashPart{Text: "message " + strconv.FormatInt(id, 10), Href: "/ui/messages/" + strconv.FormatInt(id, 10)}
}

func approvalLink(id int64) flashPart {
	return flashPart{Text: "approval " + strconv.FormatInt(id, 10), Href: "/ui/approvals/" + strconv.FormatInt(id, 10)}
}

// flashKey is the session's key for signing flashes.
func flashKey(sessionID string) []byte {
	m := hmac.New(sha256.New, []byte(sessionID))
	m.Write([]byte("dlq console flash"))
	return m.Sum(nil)
}

// flashWire is a flash in its cookie.
type flashWire struct {
	Kind    string      `json:"k,omitempty"`
	Parts   []flashPart `json:"p"`
	Expires int64       `json:"x"`
}

// maxFlashBytes keeps the cookie well within what browsers keep.
const maxFlashBytes = 2500

// redirectWithFlash answers an action: 303 to back, carrying f.
func (c *Console) redirectWithFlash(w http.ResponseWriter, r *http.Request, back string, f *flash) {
	if s := sessionFrom(r.Context()); s != nil && f != nil {
		if v, ok := encodeFlash(s.flashKey, f, time.Now()); ok {
			http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: v, Path: "/ui/", MaxAge: int(flashTTL / time.Second),
				HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		}
	}
	http.Redirect(w, r, safeNext(back), http.StatusSeeOther)
}

func encodeFlash(key []byte, f *flash, now time.Time) (string, bool) {
	parts := f.Parts
	if len(parts) == 0 {
		parts = []flashPart{{Text: f.Text}}
	}
	kind := f.Kind
	if f.Error {
		kind = flashError
	}
	// Cut the words, never the links, until it fits.
	for {
		b, err := json.Marshal(flashWire{Kind: kind, Parts: parts, Expires: now.Add(flashTTL).Unix()})
		if err != nil {
			return "", false
		}
		payload := base64.RawURLEncoding.EncodeToString(b)
		if len(payload) <= maxFlashBytes {
			return payload + "." + sign(key, payload), true
		}
		longest := -1
		for i, p := range parts {
			if p.Href == "" && (longest < 0 || len(p.Text) > len(parts[longest].Text)) {
				longest = i
			}
		}
		if longest < 0 || len(parts[longest].Text) < 16 {
			return "", false
		}
		parts = append([]flashPart(nil), parts...)
		parts[longest].Text = cutUTF8(parts[longest].Text, len(parts[longest].Text)/2) + "…"
	}
}

func cutUTF8(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func sign(key []byte, payload string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// decodeFlash reads a flash cookie's value: nil when it is not this
// session's, is damaged or has expired.
func decodeFlash(key []byte, v string, now time.Time) *flash {
	payload, mac, ok := strings.Cut(v, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(sign(key, payload))) {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil
	}
	var fw flashWire
	if json.Unmarshal(b, &fw) != nil || now.Unix() > fw.Expires {
		return nil
	}
	for _, p := range fw.Parts {
		if p.Href != "" && safeNext(p.Href) != p.Href {
			return nil
		}
	}
	return &flash{Kind: fw.Kind, Parts: fw.Parts}
}

// takeFlash reads and clears the request's flash for the page it shows.
func (c *Console) takeFlash(w http.ResponseWriter, r *http.Request, s *session) *flash {
	ck, err := r.Cookie(flashCookie)
	if err != nil {
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/ui/", MaxAge: -1, Expires: time.Unix(0, 0),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return decodeFlash(s.flashKey, ck.Value, time.Now())
}

// backOf is where an action returns: the form's back field, else the page
// the form was on (the Referer, this console's own, kept by
// Referrer-Policy same-origin), else def.
func backOf(r *http.Request, def string) string {
	if b := r.PostForm.Get("back"); b != "" {
		return safeNext(b)
	}
	if ref := r.Referer(); ref != "" {
		if u, err := r.URL.Parse(ref); err == nil && u.Host == r.Host && strings.HasPrefix(u.Path, "/ui/") {
			return safeNext(u.RequestURI())
		}
	}
	return def
}
