package ops

import (
	"time"

	"github.com/tenaz/tenaz/pkg/state"
)

// EventsFind is the search endpoint: FindRequest → FindReply. Unlike the
// other endpoints it takes any credential with the read scope: an API key
// finds only its own account's events.
const EventsFind = "events.find"

// FindRequest searches every event tenaz holds a record of (any state).
// Every field given must match (AND); at least nothing: an empty request
// lists every event of the account (or of every account, for an
// operator). The HTTP API takes the same fields as query parameters of
// GET /v1/events (entity, idempotency_key, provider_ref, since and until
// as RFC 3339).
type FindRequest struct {
	Account string      `json:"account,omitempty"`
	Kind    string      `json:"kind,omitempty"`
	State   state.State `json:"state,omitempty"`
	// EntityID is the entity the events are about (Submission.EntityID).
	EntityID string `json:"entity,omitempty"`
	// IdempotencyKey finds the one event of Account with that key
	// (Account is then required).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// ProviderRef is a provider's job id an event was given (the record's
	// reference, this one or one of an earlier stage).
	ProviderRef string `json:"provider_ref,omitempty"`
	// Since and Until bound the event's creation: Since <= created_at < Until.
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
	// Cursor is a previous reply's NextCursor for the same filter; "" is
	// the first page.
	Cursor string `json:"cursor,omitempty"`
	// Limit is the page size: 1..MaxLimit, 0 means DefaultLimit.
	Limit int `json:"limit,omitempty"`
}

// EventItem is one event found: its record as it is now.
type EventItem struct {
	ID        string      `json:"id"`
	Account   string      `json:"account"`
	Kind      string      `json:"kind"`
	State     state.State `json:"state"`
	Stage     string      `json:"stage,omitempty"`
	EntityID  string      `json:"entity_id,omitempty"`
	Attempts  int         `json:"attempts"`
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
	// NextRunAt is the event's next step (a retry, a poll, a deadline, its
	// not-before time), absent when it waits for nothing.
	NextRunAt *time.Time `json:"next_run_at,omitempty"`
}

// FindReply is one page of a search. Items run in the order the index
// met them (for a search by state, kind or account alone: when each event
// entered its current state). A page may hold fewer than Limit items and
// still have a NextCursor (each page's scan is bounded): page until
// NextCursor is "".
type FindReply struct {
	Items []EventItem `json:"items"`
	// NextCursor fetches the next page; "" when this is the last one.
	NextCursor string `json:"next_cursor,omitempty"`
}
