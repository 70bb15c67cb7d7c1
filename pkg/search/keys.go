package search

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/state"
)

// Bucket is the index's bucket (streams/data/kv-search.json); an
// installation's own is Subjects.Bucket(Bucket).
const Bucket = "tenaz_search"

// The key layout. Every entry's key ends in the event id and its value is
// the event's creation time (Unix milliseconds), so a time bound is
// checked without reading the record:
//
//	<account>.s.<state>.<kind>.<hour>.<id>   one per event, moved on each change of state
//	<account>.r.<reference>.<id>             each provider reference the event was given, hashed
//
// A search by state, kind, or account alone is a filter on the s entries
// (acme.s.*.order/create.*.*), so those need no entries of their own; the
// hour the event was created in (UTC, 2026120115) makes a time range a
// few filters of one hour each. An idempotency key needs no entry: the
// event id is derived from the account and the key (event.ID). Nor does
// an entity: the audit archive's subjects hold it (audit.EntityFilter).
const (
	fieldState = "s"
	fieldRef   = "r"
)

// kindToken is kind as one key token: its dots (the only character of a
// kind a token cannot hold) as slashes, which no kind has.
func kindToken(kind string) string { return strings.ReplaceAll(kind, ".", "/") }

// hashToken is a caller's free-form value (printable ASCII up to 255
// bytes, dots and wildcards included) as a key token: 128 bits of its
// SHA-256 in hex.
func hashToken(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:16])
}

// hourLayout formats the hour token of a creation time.
const hourLayout = "2006010215"

func hourToken(t time.Time) string { return t.UTC().Format(hourLayout) }

func stateKey(account string, st state.State, kind string, created time.Time, id string) string {
	return account + "." + fieldState + "." + string(st) + "." + kindToken(kind) + "." + hourToken(created) + "." + id
}

func refKey(account, ref, id string) string {
	return account + "." + fieldRef + "." + hashToken(ref) + "." + id
}

// anyOr is v, or the wildcard token when v is empty.
func anyOr(v string) string {
	if v == "" {
		return "*"
	}
	return v
}

// parseKey reads the account and the event id of an entry's key.
func parseKey(key string) (account, id string, ok bool) {
	i, j := strings.IndexByte(key, '.'), strings.LastIndexByte(key, '.')
	if i <= 0 || j <= i {
		return "", "", false
	}
	return key[:i], key[j+1:], true
}
