package event

import (
	"encoding/json"
	"time"

	"github.com/tenaz/tenaz/pkg/state"
)

// View is an event as the API shows it: the answer of POST /v1/events,
// GET /v1/events/{id} and DELETE /v1/events/{id}, and of the NATS
// endpoints <prefix>.api.ingest.submit, get and cancel.
type View struct {
	ID             string           `json:"id"`
	Status         state.State      `json:"status"`
	IdempotencyKey string           `json:"idempotency_key"`
	StatusURL      string           `json:"status_url"`
	Account        string           `json:"account,omitempty"`
	Kind           string           `json:"kind,omitempty"`
	EntityID       string           `json:"entity_id,omitempty"`
	OrderingKey    string           `json:"ordering_key,omitempty"`
	Stage          string           `json:"stage,omitempty"`
	Attempts       int              `json:"attempts"`
	Replays        int              `json:"replays,omitempty"`
	LastError      *state.ErrorInfo `json:"last_error,omitempty"`
	NextRunAt      *time.Time       `json:"next_run_at,omitempty"`
	Deadline       *time.Time       `json:"deadline,omitempty"`
	Polls          int              `json:"polls,omitempty"`
	Reference      string           `json:"reference,omitempty"`
	Result         json.RawMessage  `json:"result,omitempty"`
	CreatedAt      *time.Time       `json:"created_at,omitempty"`
	UpdatedAt      *time.Time       `json:"updated_at,omitempty"`
}

// HistoryView is the answer of GET /v1/events/{id}/history and of
// <prefix>.api.ingest.history: everything that happened to the event, in
// order.
type HistoryView struct {
	ID        string        `json:"id"`
	Status    state.State   `json:"status"`
	History   []state.Entry `json:"history"`
	Truncated int           `json:"history_truncated,omitempty"`
}

// SubmitRequest is the request of <prefix>.api.ingest.submit: the body of
// POST /v1/events plus the idempotency key that HTTP sends as a header.
type SubmitRequest struct {
	Submission
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// CancelRequest is the request of <prefix>.api.ingest.cancel. A bare
// event id (not JSON) is accepted too. Who cancels is not part of it: the
// history records the operator credential of the request's Authorization
// header.
type CancelRequest struct {
	ID string `json:"id"`
	// Reason is recorded in the event's history. Defaults to "cancelled by caller".
	Reason string `json:"reason,omitempty"`
}
