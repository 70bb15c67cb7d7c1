package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"

	"github.com/tenaz/tenaz/pkg/config"
)

// KeyPrefix starts every key NewKey makes, so that secret scanners and
// people recognise one.
const KeyPrefix = "tnz_"

// MinKeyLen is the shortest key that is ever accepted: shorter ones are
// refused before they are hashed, so a short, guessable password can never
// serve as a key even if its hash was configured.
const MinKeyLen = 32

// NewKey makes a new random key (KeyPrefix and 32 random bytes, base64url:
// 256 bits) and returns it with the hash to configure. The key is shown to
// its owner once and never stored. The tenaz CLI's `keys new` can call it.
func NewKey() (key, hash string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("auth: random: %w", err)
	}
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(b)
	return key, Hash(key), nil
}

// Hash returns the configured form of key: "sha256:" and the hex SHA-256,
// the same as `printf %s "$KEY" | sha256sum`.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return config.HashPrefix + hex.EncodeToString(sum[:])
}

// parseHash decodes a configured hash (validated by config).
func parseHash(h string) ([32]byte, error) {
	var out [32]byte
	if !config.ValidHash(h) {
		return out, fmt.Errorf(`not "sha256:" and 64 hex digits`)
	}
	b, _ := hex.DecodeString(h[len(config.HashPrefix):])
	copy(out[:], b)
	return out, nil
}
