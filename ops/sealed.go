package ops

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/store"
)

// Encryption at rest, the layer's part (docs/SECURITY.md): store seals
// what it writes and hands sealed rows back as they are; the layer opens
// them here, for the principals it lets read them, and nowhere else
// (replay opens what it publishes). A row that cannot be opened (its key
// is not configured, or it does not authenticate) is shown with what is
// plain and flagged in its "encryption" field; it never fails a listing.

// present prepares m for p: opened, its body dropped unless p may see
// bodies, masked unless p sees real values. Every message the layer hands
// to a door goes through it: listings, single messages, and any new read
// (an export writes each line from a message passed through present, so
// that what it writes is what the API would show that principal).
func (s *Service) present(p auth.Principal, m *store.Message) {
	s.open(m)
	if !p.Bodies {
		m.Body = nil
	}
	if s.red.masks(p) {
		s.red.message(m)
	}
}

// open fills a sealed message's properties, headers, failure, message id
// and (when read) body from its sealed part. Sealed or plain, it puts back
// the x-death header ingest left to the death record when that rebuilds it
// (store.NewMessage.DeathHeader): every message the layer hands out is
// opened here. A replay, which drops the death headers, has no need of it
// (replay/sealed.go).
func (s *Service) open(m *store.Message) {
	sl := m.Sealed
	if sl == nil {
		m.Headers = broker.RestoreDeathHeader(m.Headers, m.XDeath)
		return
	}
	m.Sealed = nil
	info := &store.EncryptionInfo{KeyID: sl.Envelope.KeyID}
	m.Encryption = info
	fail := func(err error) {
		info.Error = err.Error()
		m.Body = nil
	}
	if s.cfg.Ring == nil {
		fail(&crypt.MissingKeyError{KeyID: sl.Envelope.KeyID})
		return
	}
	k, err := s.cfg.Ring.Unwrap(sl.Envelope)
	if err != nil {
		fail(err)
		return
	}
	ref := store.MessageRef(m.ID)
	plain, err := k.Open(nil, ref, crypt.FieldMeta, sl.Meta)
	if err != nil {
		fail(err)
		return
	}
	meta, err := store.ParseSealedMeta(plain)
	if err != nil {
		fail(err)
		return
	}
	headers, err := store.MergeHeaders(m.Headers, meta.Headers)
	if err != nil {
		fail(err)
		return
	}
	headers = broker.RestoreDeathHeader(headers, m.XDeath)
	m.Properties, m.Headers, m.Failure = meta.Properties, headers, meta.Failure
	var props struct {
		MessageID *string `json:"message_id"`
	}
	if json.Unmarshal(meta.Properties, &props) == nil && props.MessageID != nil && *props.MessageID != "" {
		m.MessageID = props.MessageID
	}
	if sl.Body != nil {
		body, err := k.Open(nil, ref, crypt.FieldBody, sl.Body)
		if err != nil {
			fail(err)
			return
		}
		m.Body = &body
	}
}

// openGroup fills a sealed failure group's pattern and sample.
func (s *Service) openGroup(g *store.Group) {
	if g.Sealed == nil {
		return
	}
	blob := g.Sealed
	g.Sealed = nil
	keyID, _ := crypt.BlobKeyID(blob)
	g.Encryption = &store.EncryptionInfo{KeyID: keyID}
	if s.cfg.Ring == nil {
		g.Encryption.Error = (&crypt.MissingKeyError{KeyID: keyID}).Error()
		return
	}
	gid, err := store.ParseGroupID(g.ID)
	if err != nil {
		g.Encryption.Error = err.Error()
		return
	}
	text, err := s.cfg.Ring.OpenBlob(store.GroupRef(gid), crypt.FieldText, blob)
	if err == nil {
		g.Pattern, g.SampleMessage, err = store.OpenGroupText(text)
	}
	if err != nil {
		g.Encryption.Error = err.Error()
	}
}

// checkSearch refuses a search over sealed text. With encryption on, q
// matches only identifying values whole, through their keyed hashes
// (store); a q with white space can only be text, which is sealed. A
// filter over body fields (JSON paths) would read sealed bytes as the
// body and match nothing, an empty answer that looks like a real one (an
// export marked complete, an acknowledge of none): it is refused the same
// way. Every door (listing, total, export, actions, replays, approvals,
// the control queue) comes through here.
func (s *Service) checkSearch(f store.Filter) error {
	if !s.st.Encrypted() {
		return nil
	}
	if len(f.Fields) > 0 {
		return invalid("field: message bodies are encrypted at rest (DLQ_ENCRYPTION_KEYS), so fields in them cannot be filtered; " +
			"select by source_queue, reason, group, category, the time range, or q (an identifying value, whole) instead")
	}
	if f.Query == "" {
		return nil
	}
	if strings.IndexFunc(strings.TrimSpace(f.Query), unicode.IsSpace) >= 0 {
		return invalid("q: message bodies and failure text are encrypted at rest (DLQ_ENCRYPTION_KEYS), so they cannot be searched; " +
			"q finds a message by an identifying value, whole: its message id or correlation id, a header value, or a value in its failure message")
	}
	return nil
}

// answerPrefix marks a control command's answer stored sealed.
const answerPrefix = "sealed:v1:"

func answerRef(commandID string) crypt.Ref {
	return crypt.Ref{Table: "control_commands\x00" + commandID}
}

// SealAnswer is what control keeps of a command's answer to repeat it:
// sealed when encryption is on, since an answer may carry a message (an
// edit's copy).
func (s *Service) SealAnswer(commandID, answer string) (string, error) {
	if !s.st.Encrypted() || s.cfg.Ring == nil {
		return answer, nil
	}
	blob, err := s.cfg.Ring.SealBlob(answerRef(commandID), crypt.FieldText, []byte(answer))
	if err != nil {
		return "", fmt.Errorf("ops: seal the answer of command %q: %w", commandID, err)
	}
	return answerPrefix + base64.StdEncoding.EncodeToString(blob), nil
}

// OpenAnswer gives back a stored answer, for the principal that sent the
// command (control checked it is the same).
func (s *Service) OpenAnswer(commandID, stored string) (string, error) {
	enc, ok := strings.CutPrefix(stored, answerPrefix)
	if !ok {
		return stored, nil
	}
	blob, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return "", fmt.Errorf("ops: the stored answer of command %q: %w", commandID, err)
	}
	if s.cfg.Ring == nil {
		keyID, _ := crypt.BlobKeyID(blob)
		return "", &crypt.MissingKeyError{KeyID: keyID}
	}
	plain, err := s.cfg.Ring.OpenBlob(answerRef(commandID), crypt.FieldText, blob)
	if err != nil {
		return "", fmt.Errorf("ops: the stored answer of command %q: %w", commandID, err)
	}
	return string(plain), nil
}
