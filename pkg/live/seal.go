package live

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// sealedPrefix starts a sealed value: the standard base64 of a 12-byte
// nonce and the AES-256-GCM ciphertext follows.
const sealedPrefix = "sealed:v1:"

// ErrNoSealingKey is returned when a secret is to be sealed or opened and
// sealing_key is unset.
var ErrNoSealingKey = errors.New("sealing_key is not set: the accounts bucket takes no header values without it (docs/configuration.md)")

// ErrUnseal is returned for a sealed value that does not open: another
// key sealed it, or it was altered.
var ErrUnseal = errors.New("a sealed value does not open with sealing_key")

func aead(key []byte) (cipher.AEAD, error) {
	if len(key) == 0 {
		return nil, ErrNoSealingKey
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// seal seals clear for account: the account's name is bound in (as
// additional data), so a sealed value moved to another account does not
// open.
func seal(key []byte, account, clear string) (string, error) {
	g, err := aead(key)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, g.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := g.Seal(nonce, nonce, []byte(clear), []byte(account))
	return sealedPrefix + base64.StdEncoding.EncodeToString(out), nil
}

// unseal opens a value seal made for account.
func unseal(key []byte, account, sealed string) (string, error) {
	b64, ok := strings.CutPrefix(sealed, sealedPrefix)
	if !ok {
		return "", fmt.Errorf("%w: not a sealed value", ErrUnseal)
	}
	g, err := aead(key)
	if err != nil {
		return "", err
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) < g.NonceSize() {
		return "", ErrUnseal
	}
	clear, err := g.Open(nil, b[:g.NonceSize()], b[g.NonceSize():], []byte(account))
	if err != nil {
		return "", ErrUnseal
	}
	return string(clear), nil
}

// isSealed reports whether s is a sealed value.
func isSealed(s string) bool { return strings.HasPrefix(s, sealedPrefix) }
