package provider

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

// Standard Webhooks header names.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// Errors returned by Verify. Each wraps ErrSignature.
var (
	// ErrSignature is wrapped by every verification failure.
	ErrSignature = errors.New("webhook signature")
	// ErrMissingHeader: a webhook-* header is absent.
	ErrMissingHeader = fmt.Errorf("%w: missing header", ErrSignature)
	// ErrTimestamp: webhook-timestamp is not a number or is further from
	// now than the tolerance.
	ErrTimestamp = fmt.Errorf("%w: timestamp out of tolerance", ErrSignature)
	// ErrMismatch: no v1 signature in webhook-signature matches.
	ErrMismatch = fmt.Errorf("%w: no matching signature", ErrSignature)
)

// secretKey decodes a "whsec_<base64>" secret; any other string (or a
// whsec_ one whose rest is not base64) is used as raw bytes.
func secretKey(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(rest); err == nil {
			return k
		}
	}
	return []byte(secret)
}

// Sign returns the Standard Webhooks signature header value "v1,<base64>":
// HMAC-SHA256 with the secret over "<id>.<unix seconds of ts>.<body>".
// The secret is "whsec_<base64>" or raw bytes.
func Sign(secret, id string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(secretKey(secret), id, strconv.FormatInt(ts.Unix(), 10), body))
}

func mac(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// SignHeaders sets the three Standard Webhooks headers on h.
func SignHeaders(h http.Header, secret, id string, ts time.Time, body []byte) {
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderWebhookSignature, Sign(secret, id, ts, body))
}

// Verify checks the Standard Webhooks headers in h against body: the
// timestamp must be within tolerance of now (either way; tolerance <= 0
// means DefaultTolerance) and one of the space-separated "v1,<base64>"
// signatures must match. Errors wrap ErrSignature.
func Verify(secret string, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	id, tsText, sigs := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	for _, hv := range [...][2]string{{HeaderWebhookID, id}, {HeaderWebhookTimestamp, tsText}, {HeaderWebhookSignature, sigs}} {
		if hv[1] == "" {
			return fmt.Errorf("%w %s", ErrMissingHeader, hv[0])
		}
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sec, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not unix seconds", ErrTimestamp, tsText)
	}
	if skew := now.Sub(time.Unix(sec, 0)).Abs(); skew > tolerance {
		return fmt.Errorf("%w: %s away from now, tolerance %s", ErrTimestamp, skew.Truncate(time.Second), tolerance)
	}
	want := mac(secretKey(secret), id, tsText, body)
	for _, s := range strings.Fields(sigs) {
		v, b64, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrMismatch
}
