package event

import (
	"crypto/sha256"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// hashID is ID as a hash.Hash writes it: the reference ID is checked against.
func hashID(account, key string) string {
	h := sha256.New()
	h.Write([]byte(account))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "ev_" + idEncoding.EncodeToString(h.Sum(nil))[:26]
}

// ID is the reference's for any account and key, short (on the stack) or
// long.
func TestIDMatchesHash(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		account := rapid.String().Draw(t, "account")
		key := rapid.OneOf(rapid.String(), rapid.Map(rapid.IntRange(200, 600), func(n int) string { return strings.Repeat("k", n) })).Draw(t, "key")
		if got, want := ID(account, key), hashID(account, key); got != want {
			t.Fatalf("ID(%q, %q) = %s, want %s", account, key, got, want)
		}
	})
}

func BenchmarkID(b *testing.B) {
	b.Run("ID", func(b *testing.B) {
		for b.Loop() {
			_ = ID("acme", "order-1234")
		}
	})
	b.Run("hash.Hash", func(b *testing.B) {
		for b.Loop() {
			_ = hashID("acme", "order-1234")
		}
	})
}
