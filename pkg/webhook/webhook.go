// Package webhook signs and verifies Standard Webhooks
// (https://www.standardwebhooks.com): an HMAC-SHA256 over
// "<webhook-id>.<webhook-timestamp>.<body>", sent as
// "webhook-signature: v1,<base64>". tenaz signs its outbound calls with it
// and verifies provider callbacks with it.
//
//	h := webhook.Headers(secret, msgID, time.Now(), body) // set on the request
//	err := webhook.Verify(secret, r.Header, body, 5*time.Minute, time.Now())
//
// A receiver checks the headers before it reads the body:
//
//	sig, err := webhook.Check(r.Header, 5*time.Minute, time.Now()) // refuse on err
//	body, _ := io.ReadAll(r.Body)
//	err = sig.Verify(secret, body)
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Verification failures; all wrap ErrInvalid.
var (
	ErrInvalid   = errors.New("invalid webhook")
	ErrSignature = fmt.Errorf("%w: signature does not match", ErrInvalid)
	ErrTimestamp = fmt.Errorf("%w: timestamp outside tolerance", ErrInvalid)
	ErrHeaders   = fmt.Errorf("%w: missing or malformed webhook headers", ErrInvalid)
)

// Key decodes a secret: "whsec_<base64>" is the Standard Webhooks form;
// anything else is used as raw bytes.
func Key(secret string) []byte {
	if b64, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(b64); err == nil {
			return k
		}
	}
	return []byte(secret)
}

// Sign returns the "v1,<base64>" signature of body.
func Sign(secret, id string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(sum(secret, id, ts, body))
}

// sum is the HMAC-SHA256 of "<id>.<unix seconds>.<body>".
func sum(secret, id string, ts time.Time, body []byte) []byte {
	mac := hmac.New(sha256.New, Key(secret))
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(ts.Unix(), 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}

// Headers returns the three headers of a signed message.
func Headers(secret, id string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(secret, id, ts, body))
	return h
}

// Signature is the checked headers of a received message: what Check
// found, before the body is read.
type Signature struct {
	ID        string    // webhook-id
	Timestamp time.Time // webhook-timestamp
	macs      [][]byte  // the decoded v1 signatures
}

// Limits of a well-formed message's headers.
const (
	maxIDLen        = 256
	maxSignatureLen = 4096
)

// Check checks the headers of a received message, so that a forged or
// stale one is refused before its body is read: webhook-id is 1-256
// printable ASCII characters, webhook-timestamp is unix seconds within
// tolerance of now (either way), and webhook-signature holds at most 4096
// bytes of space-separated signatures, at least one of them
// "v1,<base64 of 32 bytes>" (others are ignored). Every failure wraps
// ErrInvalid and ErrHeaders or ErrTimestamp.
func Check(h http.Header, tolerance time.Duration, now time.Time) (Signature, error) {
	id, tsv, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	for _, hv := range [...][2]string{{HeaderID, id}, {HeaderTimestamp, tsv}, {HeaderSignature, sigs}} {
		if hv[1] == "" {
			return Signature{}, fmt.Errorf("%w: %s is missing", ErrHeaders, hv[0])
		}
	}
	if len(id) > maxIDLen || len(sigs) > maxSignatureLen {
		return Signature{}, fmt.Errorf("%w: too long", ErrHeaders)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return Signature{}, fmt.Errorf("%w: %s must be printable ASCII", ErrHeaders, HeaderID)
		}
	}
	sec, err := strconv.ParseInt(tsv, 10, 64)
	if err != nil || tsv[0] < '0' || tsv[0] > '9' {
		return Signature{}, fmt.Errorf("%w: %s is not unix seconds", ErrHeaders, HeaderTimestamp)
	}
	ts := time.Unix(sec, 0)
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return Signature{}, fmt.Errorf("%w: %s away from now, tolerance %s", ErrTimestamp, d.Abs().Truncate(time.Second), tolerance)
	}
	sig := Signature{ID: id, Timestamp: ts}
	for _, f := range strings.Fields(sigs) {
		b64, ok := strings.CutPrefix(f, "v1,")
		if !ok || len(b64) != base64.StdEncoding.EncodedLen(sha256.Size) {
			continue
		}
		// Strict: one MAC has one encoding, so a signature cannot be
		// re-spelt (other trailing bits) and still pass as a new one.
		if mac, err := base64.StdEncoding.Strict().DecodeString(b64); err == nil && len(mac) == sha256.Size {
			sig.macs = append(sig.macs, mac)
		}
	}
	if len(sig.macs) == 0 {
		return Signature{}, fmt.Errorf("%w: %s has no v1 signature (v1,<base64 of 32 bytes>)", ErrHeaders, HeaderSignature)
	}
	return sig, nil
}

// Verify checks body against the signatures (constant-time compare): nil
// when one of them is the HMAC of the message under secret, else
// ErrSignature.
func (s Signature) Verify(secret string, body []byte) error {
	want := sum(secret, s.ID, s.Timestamp, body)
	for _, m := range s.macs {
		if hmac.Equal(m, want) {
			return nil
		}
	}
	return ErrSignature
}

// Verify checks a received message: Check, then Signature.Verify. Every
// failure wraps ErrInvalid and one of ErrHeaders, ErrTimestamp or
// ErrSignature.
func Verify(secret string, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	s, err := Check(h, tolerance, now)
	if err != nil {
		return err
	}
	return s.Verify(secret, body)
}
