package search

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/httpapi"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// ErrBadQuery is wrapped by every refusal of a query: a parameter out of
// shape, or a cursor that is not one of this query's.
var ErrBadQuery = errors.New("bad query")

// ParamError names the parameter a query is refused for.
type ParamError struct {
	Param  string
	Reason string
}

func (e *ParamError) Error() string { return e.Param + ": " + e.Reason }

// Unwrap makes every ParamError an ErrBadQuery.
func (e *ParamError) Unwrap() error { return ErrBadQuery }

func bad(param, format string, args ...any) error {
	return &ParamError{Param: param, Reason: fmt.Sprintf(format, args...)}
}

// params are the query parameters of GET /v1/events.
var params = []string{"account", "kind", "state", "entity", "idempotency_key", "provider_ref", "since", "until", "cursor", "limit"}

// ParseQuery reads the query parameters of GET /v1/events (and of the
// screen's search form) and validates them: an unknown or repeated
// parameter, or one out of shape, is a *ParamError naming it.
func ParseQuery(v url.Values) (ops.FindRequest, error) {
	if qe := httpapi.CheckQuery(v, params...); qe != nil {
		return ops.FindRequest{}, bad(qe.Param, "%s", qe.Reason)
	}
	q := ops.FindRequest{Account: v.Get("account"), Kind: v.Get("kind"), State: state.State(v.Get("state")),
		EntityID: v.Get("entity"), IdempotencyKey: v.Get("idempotency_key"), ProviderRef: v.Get("provider_ref"), Cursor: v.Get("cursor")}
	for _, p := range []struct {
		name string
		dst  **time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		raw := v.Get(p.name)
		if raw == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			return q, bad(p.name, "want an RFC 3339 time (2026-03-01T06:00:00Z), got %q", raw)
		}
		*p.dst = &t
	}
	if raw := v.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n == 0 { // 0 is the default of a request over NATS, not a page size to ask for
			return q, bad("limit", "want 1..%d, got %q", ops.MaxLimit, raw)
		}
		q.Limit = n
	}
	return q, Validate(q)
}

// Validate checks a query's fields (what ParseQuery does after reading
// them; the NATS endpoint's requests come as JSON).
func Validate(q ops.FindRequest) error {
	if q.Account != "" && names.ValidateAccount(q.Account) != nil {
		return bad("account", "want 1-%d characters of [A-Za-z0-9_-], got %q", names.MaxAccountLen, q.Account)
	}
	if q.Kind != "" && names.ValidateKind(q.Kind) != nil {
		return bad("kind", "want dot-separated tokens of [A-Za-z0-9_-], got %q", q.Kind)
	}
	if q.State != "" && !q.State.Valid() {
		return bad("state", "unknown state %q", q.State)
	}
	for _, k := range []struct{ param, v string }{{"entity", q.EntityID}, {"idempotency_key", q.IdempotencyKey}, {"provider_ref", q.ProviderRef}} {
		if k.v == "" {
			continue
		}
		if k.param == "provider_ref" {
			// A reference is the provider's: bounded as the record keeps it.
			if len(k.v) > 1024 {
				return bad(k.param, "longer than 1024 bytes")
			}
			continue
		}
		check := names.ValidateKey
		if k.param == "idempotency_key" {
			check = event.CheckKey // a derived key too, as the 202 answered it
		}
		if err := check(k.param, k.v); err != nil {
			return bad(k.param, "want 1-%d characters of printable ASCII without spaces", names.MaxKeyLen)
		}
	}
	if q.IdempotencyKey != "" && q.Account == "" {
		return bad("idempotency_key", "needs account: keys are per account")
	}
	if q.Since != nil && q.Until != nil && !q.Since.Before(*q.Until) {
		return bad("until", "%s is not after since %s", q.Until.UTC().Format(time.RFC3339), q.Since.UTC().Format(time.RFC3339))
	}
	if q.Limit < 0 || q.Limit > ops.MaxLimit {
		return bad("limit", "want 1..%d, got %d", ops.MaxLimit, q.Limit)
	}
	if q.Cursor != "" {
		if _, err := decodeCursor(q); err != nil {
			return err
		}
	}
	return nil
}

// A cursor is where a search goes on: the stream sequence of the index
// (or of the archive, for an entity scanned), in the creation hour (Unix
// hours; 0 when the search is not an hour at a time), or the last event
// id of the page before (an entity listed), and a checksum of the filter
// it belongs to (a cursor of another filter would skip that filter's
// events): "c1" then base64url of uvarint(seq), uvarint(hour) and the
// CRC-32; "c2" then base64url of the id and the CRC-32.
const (
	cursorVersion   = "c1"
	cursorVersionID = "c2"
)

type cursor struct {
	seq   uint64
	hour  int64
	after string // an event id
}

// filterSum is the checksum of q's filter (everything but the page).
func filterSum(q ops.FindRequest) uint32 {
	var b strings.Builder
	for _, f := range []string{q.Account, q.Kind, string(q.State), q.EntityID, q.IdempotencyKey, q.ProviderRef} {
		b.WriteString(f)
		b.WriteByte(0)
	}
	for _, t := range []*time.Time{q.Since, q.Until} {
		if t != nil {
			b.WriteString(strconv.FormatInt(t.UnixNano(), 10))
		}
		b.WriteByte(0)
	}
	if fromArchive(q) {
		// Its sequences are the archive's: a cursor of the index's entity
		// entries (before the archive answered) goes nowhere.
		b.WriteString("archive")
	}
	return crc32.ChecksumIEEE([]byte(b.String()))
}

func encodeCursor(q ops.FindRequest, c cursor) string {
	if c.after != "" {
		b := binary.BigEndian.AppendUint32([]byte(c.after), filterSum(q))
		return cursorVersionID + base64.RawURLEncoding.EncodeToString(b)
	}
	b := binary.AppendUvarint(nil, c.seq)
	b = binary.AppendUvarint(b, uint64(c.hour))
	b = binary.BigEndian.AppendUint32(b, filterSum(q))
	return cursorVersion + base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads q's cursor.
func decodeCursor(q ops.FindRequest) (cursor, error) {
	notOne := bad("cursor", "not a cursor of this API: pass a reply's next_cursor as it is")
	if rest, ok := strings.CutPrefix(q.Cursor, cursorVersionID); ok {
		b, err := base64.RawURLEncoding.DecodeString(rest)
		if err != nil || len(b) <= 4 || len(b) > 4+names.MaxKeyLen {
			return cursor{}, notOne
		}
		id := string(b[:len(b)-4])
		if names.ValidateKey("cursor", id) != nil {
			return cursor{}, notOne
		}
		if binary.BigEndian.Uint32(b[len(b)-4:]) != filterSum(q) {
			return cursor{}, wrongFilter
		}
		return cursor{after: id}, nil
	}
	rest, ok := strings.CutPrefix(q.Cursor, cursorVersion)
	if !ok || len(rest) > 40 {
		return cursor{}, notOne
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return cursor{}, notOne
	}
	seq, n := binary.Uvarint(b)
	if n <= 0 || seq == 0 {
		return cursor{}, notOne
	}
	hour, m := binary.Uvarint(b[n:])
	if m <= 0 || hour > 1<<40 || len(b) != n+m+4 {
		return cursor{}, notOne
	}
	if binary.BigEndian.Uint32(b[n+m:]) != filterSum(q) {
		return cursor{}, wrongFilter
	}
	return cursor{seq: seq, hour: int64(hour)}, nil
}

var wrongFilter = bad("cursor", "belongs to another filter: a cursor goes on only with the filter of the page it came with")
