package provider_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/provider"
)

func TestSignKnownVector(t *testing.T) {
	t.Parallel()
	// The test vector of the Standard Webhooks reference libraries.
	got := provider.Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("want %s, got %s", want, got)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"event_id":"e1","reference":"ref_1","status":"approved"}`)
	rawKey := []byte("0123456789abcdef0123456789abcdef")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(rawKey)
	signed := func(secret string, ts time.Time) http.Header {
		h := http.Header{}
		provider.SignHeaders(h, secret, "msg_1", ts, body)
		return h
	}
	tests := []struct {
		name   string
		secret string
		header http.Header
		body   []byte
		want   error
	}{
		{"whsec roundtrip", whsec, signed(whsec, now), body, nil},
		{"raw secret roundtrip", "plain-secret", signed("plain-secret", now), body, nil},
		{"whsec and its raw bytes are the same key", string(rawKey), signed(whsec, now), body, nil},
		{"within tolerance", whsec, signed(whsec, now.Add(-4*time.Minute)), body, nil},
		{"tampered body", whsec, signed(whsec, now), []byte(`{"event_id":"e2"}`), provider.ErrMismatch},
		{"wrong secret", "other", signed(whsec, now), body, provider.ErrMismatch},
		{"old timestamp", whsec, signed(whsec, now.Add(-6*time.Minute)), body, provider.ErrTimestamp},
		{"future timestamp", whsec, signed(whsec, now.Add(6*time.Minute)), body, provider.ErrTimestamp},
		{"missing headers", whsec, http.Header{}, body, provider.ErrMissingHeader},
		{"one of many signatures matches", whsec, func() http.Header {
			h := signed(whsec, now)
			h.Set("webhook-signature", "v1,AAAA v2,xyz "+h.Get("webhook-signature"))
			return h
		}(), body, nil},
		{"timestamp not a number", whsec, func() http.Header {
			h := signed(whsec, now)
			h.Set("webhook-timestamp", "soon")
			return h
		}(), body, provider.ErrTimestamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := provider.Verify(tt.secret, tt.header, tt.body, 5*time.Minute, now)
			if tt.want == nil && err != nil {
				t.Errorf("want a valid signature, got %v", err)
			}
			if tt.want != nil && (!errors.Is(err, tt.want) || !errors.Is(err, provider.ErrSignature)) {
				t.Errorf("want %v (wrapping ErrSignature), got %v", tt.want, err)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	const secret = "whsec_c2VjcmV0" // "secret"
	now := time.Unix(1_800_000_000, 0)
	f.Add("msg_1", "1800000000", "v1,AAAA", []byte(`{}`))
	f.Add("msg_1", "1800000000", provider.Sign(secret, "msg_1", now, []byte(`{}`)), []byte(`{}`))
	f.Add("", "x", "v1,", []byte(nil))
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		err := provider.Verify(secret, h, body, time.Hour, now)
		if err == nil {
			// Accepted: one of the signatures must be the HMAC of what was sent.
			m := hmac.New(sha256.New, []byte("secret"))
			m.Write([]byte(id + "." + ts + "."))
			m.Write(body)
			want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
			if !slices.Contains(strings.Fields(sig), want) {
				t.Errorf("accepted %q for id %q ts %q, want it to contain %s", sig, id, ts, want)
			}
		} else if !errors.Is(err, provider.ErrSignature) {
			t.Errorf("want every failure to wrap ErrSignature, got %v", err)
		}
	})
}
