package webhook_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/webhook"
)

// The test vector of the Standard Webhooks reference libraries.
const (
	refSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	refID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	refTS     = 1614265330
	refBody   = `{"test": 2432232314}`
	refSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestReferenceVector(t *testing.T) {
	t.Parallel()
	ts := time.Unix(refTS, 0)
	if got := webhook.Sign(refSecret, refID, ts, []byte(refBody)); got != refSig {
		t.Errorf("Sign(reference vector): want %s, got %s", refSig, got)
	}
	h := http.Header{}
	h.Set("Webhook-Id", refID)
	h.Set("Webhook-Timestamp", strconv.Itoa(refTS))
	h.Set("Webhook-Signature", refSig)
	if err := webhook.Verify(refSecret, h, []byte(refBody), 5*time.Minute, ts.Add(time.Minute)); err != nil {
		t.Errorf("Verify(reference vector): want nil, got %v", err)
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	ts := time.Unix(refTS, 999_000_000) // sub-second part is dropped
	h := webhook.Headers(refSecret, refID, ts, []byte(refBody))
	for name, want := range map[string]string{webhook.HeaderID: refID, webhook.HeaderTimestamp: "1614265330", webhook.HeaderSignature: refSig} {
		if got := h.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("header %s: want [%s], got %v", name, want, got)
		}
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	raw := []byte{0, 1, 2, 0xfe, 0xff}
	tests := []struct {
		name, secret string
		want         []byte
	}{
		{"whsec_ is base64-decoded", "whsec_" + base64.StdEncoding.EncodeToString(raw), raw},
		{"reference secret", refSecret, mustB64(t, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")},
		{"raw secret as bytes", "plain-secret", []byte("plain-secret")},
		{"whsec_ with bad base64 is raw", "whsec_not*base64", []byte("whsec_not*base64")},
		{"prefix is case-sensitive", "WHSEC_AAAA", []byte("WHSEC_AAAA")},
		{"empty", "", []byte("")},
	}
	for _, tt := range tests {
		if got := webhook.Key(tt.secret); !bytes.Equal(got, tt.want) {
			t.Errorf("%s: Key(%q): want %x, got %x", tt.name, tt.secret, tt.want, got)
		}
	}
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"event_id":"e1","reference":"ref_1","status":"approved"}`)
	rawKey := []byte("0123456789abcdef0123456789abcdef")
	whsec := "whsec_" + base64.StdEncoding.EncodeToString(rawKey)
	signed := func(secret string, ts time.Time) http.Header { return webhook.Headers(secret, "msg_1", ts, body) }
	with := func(h http.Header, k, v string) http.Header {
		h = h.Clone()
		if v == "" {
			h.Del(k)
		} else {
			h.Set(k, v)
		}
		return h
	}
	good := signed(whsec, now)
	tests := []struct {
		name   string
		secret string
		header http.Header
		body   []byte
		want   error // nil: verifies
	}{
		{"whsec round trip", whsec, good, body, nil},
		{"raw secret round trip", "plain-secret", signed("plain-secret", now), body, nil},
		{"whsec and its raw bytes are one key", string(rawKey), good, body, nil},
		{"within tolerance, past", whsec, signed(whsec, now.Add(-299*time.Second)), body, nil},
		{"within tolerance, future", whsec, signed(whsec, now.Add(299*time.Second)), body, nil},
		{"at the tolerance", whsec, signed(whsec, now.Add(-5*time.Minute)), body, nil},
		{"tampered body", whsec, good, []byte(`{"event_id":"e2","reference":"ref_1","status":"approved"}`), webhook.ErrSignature},
		{"body with a trailing newline", whsec, good, append(bytes.Clone(body), '\n'), webhook.ErrSignature},
		{"empty body", whsec, good, nil, webhook.ErrSignature},
		{"wrong secret", "whsec_" + base64.StdEncoding.EncodeToString([]byte("another key")), good, body, webhook.ErrSignature},
		{"tampered id", whsec, with(good, webhook.HeaderID, "msg_2"), body, webhook.ErrSignature},
		{"tampered timestamp (within tolerance)", whsec, with(good, webhook.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10)), body, webhook.ErrSignature},
		{"old timestamp", whsec, signed(whsec, now.Add(-5*time.Minute-time.Second)), body, webhook.ErrTimestamp},
		{"future timestamp", whsec, signed(whsec, now.Add(5*time.Minute+time.Second)), body, webhook.ErrTimestamp},
		{"timestamp at the epoch", whsec, signed(whsec, time.Unix(0, 0)), body, webhook.ErrTimestamp},
		{"timestamp far beyond int64 time", whsec, with(good, webhook.HeaderTimestamp, "9223372036854775807"), body, webhook.ErrTimestamp},
		{"negative timestamp", whsec, with(good, webhook.HeaderTimestamp, "-1800000000"), body, webhook.ErrHeaders},
		{"signed timestamp", whsec, with(good, webhook.HeaderTimestamp, "+"+strconv.FormatInt(now.Unix(), 10)), body, webhook.ErrHeaders},
		{"timestamp not a number", whsec, with(good, webhook.HeaderTimestamp, "soon"), body, webhook.ErrHeaders},
		{"timestamp in milliseconds", whsec, with(good, webhook.HeaderTimestamp, "1800000000000"), body, webhook.ErrTimestamp},
		{"no headers", whsec, http.Header{}, body, webhook.ErrHeaders},
		{"missing id", whsec, with(good, webhook.HeaderID, ""), body, webhook.ErrHeaders},
		{"missing timestamp", whsec, with(good, webhook.HeaderTimestamp, ""), body, webhook.ErrHeaders},
		{"missing signature", whsec, with(good, webhook.HeaderSignature, ""), body, webhook.ErrHeaders},
		{"id too long", whsec, with(good, webhook.HeaderID, strings.Repeat("i", 257)), body, webhook.ErrHeaders},
		{"id with a control character", whsec, with(good, webhook.HeaderID, "msg\x01"), body, webhook.ErrHeaders},
		{"signature header too long", whsec, with(good, webhook.HeaderSignature, strings.Repeat("v1,AAAA ", 600)+good.Get(webhook.HeaderSignature)), body, webhook.ErrHeaders},
		{"one of many signatures matches", whsec, with(good, webhook.HeaderSignature, "v1,AAAA v2,xyz "+good.Get(webhook.HeaderSignature)+" v1,BBBB"), body, nil},
		{"rotated secret: old and new signatures", whsec, with(good, webhook.HeaderSignature,
			webhook.Sign("old-secret", "msg_1", now, body)+" "+good.Get(webhook.HeaderSignature)), body, nil},
		{"several signatures, none well-formed", whsec, with(good, webhook.HeaderSignature, "v1,AAAA v1,BBBB"), body, webhook.ErrHeaders},
		{"several well-formed signatures, none matches", whsec, with(good, webhook.HeaderSignature,
			webhook.Sign("old-secret", "msg_1", now, body)+" "+webhook.Sign("other-secret", "msg_1", now, body)), body, webhook.ErrSignature},
		{"right MAC under another version", whsec, with(good, webhook.HeaderSignature, "v2,"+strings.TrimPrefix(good.Get(webhook.HeaderSignature), "v1,")), body, webhook.ErrHeaders},
		{"right MAC without a version", whsec, with(good, webhook.HeaderSignature, strings.TrimPrefix(good.Get(webhook.HeaderSignature), "v1,")), body, webhook.ErrHeaders},
		{"truncated MAC", whsec, with(good, webhook.HeaderSignature, good.Get(webhook.HeaderSignature)[:20]), body, webhook.ErrHeaders},
		{"right MAC spelt with other trailing bits", whsec, with(good, webhook.HeaderSignature, respell(good.Get(webhook.HeaderSignature))), body, webhook.ErrHeaders},
		{"wrong MAC of the right length", whsec, with(good, webhook.HeaderSignature, "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32))), body, webhook.ErrSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := webhook.Verify(tt.secret, tt.header, tt.body, 5*time.Minute, now)
			if tt.want == nil {
				if err != nil {
					t.Errorf("want a valid signature, got %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !errors.Is(err, webhook.ErrInvalid) {
				t.Errorf("want an error wrapping %v and ErrInvalid, got %v", tt.want, err)
			}
		})
	}
}

func TestVerifyErrorsSayWhy(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	h := webhook.Headers("s", "msg_1", now.Add(-2*time.Minute), nil)
	err := webhook.Verify("s", h, nil, time.Minute, now)
	if err == nil || !strings.Contains(err.Error(), "2m0s away from now, tolerance 1m0s") {
		t.Errorf("want the skew and tolerance in the message, got %v", err)
	}
	h.Del(webhook.HeaderSignature)
	if err := webhook.Verify("s", h, nil, time.Minute, now); err == nil || !strings.Contains(err.Error(), webhook.HeaderSignature) {
		t.Errorf("want the missing header named, got %v", err)
	}
}

// TestCheckNeedsNoBody: Check decides on the headers alone (a receiver
// refuses before reading the body), and what it accepts verifies against
// the body it was signed over.
func TestCheckNeedsNoBody(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"status":"approved"}`)
	h := webhook.Headers("whsec_c2VjcmV0", "msg_1", now, body)
	sig, err := webhook.Check(h, time.Minute, now)
	if err != nil {
		t.Fatalf("Check(good headers): want nil, got %v", err)
	}
	if sig.ID != "msg_1" || !sig.Timestamp.Equal(now) {
		t.Errorf("Check: want id msg_1 at %v, got %q at %v", now, sig.ID, sig.Timestamp)
	}
	if err := sig.Verify("whsec_c2VjcmV0", body); err != nil {
		t.Errorf("Verify(signed body): want nil, got %v", err)
	}
	if err := sig.Verify("whsec_c2VjcmV0", []byte(`{}`)); !errors.Is(err, webhook.ErrSignature) {
		t.Errorf("Verify(another body): want ErrSignature, got %v", err)
	}
	if _, err := webhook.Check(h, time.Minute, now.Add(2*time.Minute)); !errors.Is(err, webhook.ErrTimestamp) {
		t.Errorf("Check(stale headers): want ErrTimestamp, got %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	const secret = "whsec_c2VjcmV0" // "secret"
	now := time.Unix(1_800_000_000, 0)
	f.Add("msg_1", "1800000000", "v1,AAAA", []byte(`{}`))
	f.Add("msg_1", "1800000000", webhook.Sign(secret, "msg_1", now, []byte(`{}`)), []byte(`{}`))
	f.Add("msg_1", "+1800000000", webhook.Sign(secret, "msg_1", now, []byte(`{}`)), []byte(`{}`))
	f.Add("msg_1", "01800000000", "v2,x v1,"+strings.Repeat("A", 44), []byte(nil))
	f.Add("", "x", "v1,", []byte(nil))
	f.Add("msg_1", "1800000000", respell(webhook.Sign(secret, "msg_1", now, []byte(`{}`))), []byte(`{}`))
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(webhook.HeaderID, id)
		h.Set(webhook.HeaderTimestamp, ts)
		h.Set(webhook.HeaderSignature, sig)
		err := webhook.Verify(secret, h, body, time.Hour, now)
		if err != nil {
			if !errors.Is(err, webhook.ErrInvalid) {
				t.Fatalf("want every failure to wrap ErrInvalid, got %v", err)
			}
			return
		}
		// Accepted: one of the signatures must be the HMAC, computed here
		// independently, of what was sent.
		sec, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil {
			t.Fatalf("accepted timestamp %q that is not a number", ts)
		}
		m := hmac.New(sha256.New, []byte("secret"))
		fmt.Fprintf(m, "%s.%d.", id, sec)
		m.Write(body)
		want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
		found := false
		for _, s := range strings.Fields(h.Get(webhook.HeaderSignature)) {
			found = found || s == want
		}
		if !found {
			t.Fatalf("accepted %q for id %q ts %q body %q, want it to contain %s", sig, id, ts, body, want)
		}
	})
}

// respell changes the unused low bits of a "v1,<base64>" signature's last
// character: lenient decoders read it as the same MAC.
func respell(sig string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	i := len(sig) - 2 // 32 bytes encode to 43 characters and one "="
	c := strings.IndexByte(alphabet, sig[i])
	return sig[:i] + string(alphabet[c^1]) + sig[i+1:]
}
