// Package webhook signs and verifies Standard Webhooks
// (https://www.standardwebhooks.com): an HMAC-SHA256 over
// "<webhook-id>.<webhook-timestamp>.<body>", sent as
// "webhook-signature: v1,<base64>". tenaz signs its outbound calls with it
// and verifies provider callbacks with it.
//
//	h := webhook.Headers(secret, msgID, time.Now(), body) // set on the request
//	err := webhook.Verify(secret, r.Header, body, 5*time.Minute, time.Now())
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
	mac := hmac.New(sha256.New, Key(secret))
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(strconv.FormatInt(ts.Unix(), 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Headers returns the three headers of a signed message.
func Headers(secret, id string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(secret, id, ts, body))
	return h
}

// Verify checks the headers of a received message against secret: the
// timestamp must be within tolerance of now (either way) and one of the
// space-separated v1 signatures must match (constant-time compare). Every
// failure wraps ErrInvalid and one of ErrHeaders, ErrTimestamp or
// ErrSignature.
func Verify(secret string, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	id, tsv, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	for _, hv := range [...][2]string{{HeaderID, id}, {HeaderTimestamp, tsv}, {HeaderSignature, sigs}} {
		if hv[1] == "" {
			return fmt.Errorf("%w: %s is missing", ErrHeaders, hv[0])
		}
	}
	if len(id) > 256 || len(sigs) > 4096 {
		return fmt.Errorf("%w: too long", ErrHeaders)
	}
	sec, err := strconv.ParseInt(tsv, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s is not unix seconds", ErrHeaders, HeaderTimestamp)
	}
	ts := time.Unix(sec, 0)
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s away from now, tolerance %s", ErrTimestamp, d.Abs().Truncate(time.Second), tolerance)
	}
	want := Sign(secret, id, ts, body)
	for _, s := range strings.Fields(sigs) {
		if strings.HasPrefix(s, "v1,") && hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return ErrSignature
}
