package ops

import (
	"time"

	"github.com/tenaz/tenaz/pkg/state"
)

// EntitiesTimeline is the endpoint of an entity's timeline (TimelineRequest
// → TimelineReply). Unlike the others it also answers an API key with the
// read scope, for its own account only.
const EntitiesTimeline = "entities.timeline"

// MaxTimeline bounds the entries of one timeline reply; beyond it the
// reply says Truncated and keeps the oldest.
const MaxTimeline = 10000

// TimelineRequest asks for everything the audit archive holds about one
// business entity of one account: the caller's entity id, as it was
// submitted (entity_id), not tenaz's event id.
type TimelineRequest struct {
	Account  string `json:"account"`
	EntityID string `json:"entity_id"`
}

// TimelineReply is an entity's events and their entries, in order.
type TimelineReply struct {
	Account  string `json:"account"`
	EntityID string `json:"entity_id"`
	// Events are the entity's events, oldest first.
	Events []TimelineEvent `json:"events"`
	// Items are every history entry of those events and the operator
	// actions on the account (pause, resume, breakers) between the
	// first and the last of them, by time.
	Items []AuditEntry `json:"items"`
	// Truncated: there were more than MaxTimeline entries; Items has the
	// oldest.
	Truncated bool `json:"truncated,omitempty"`
}

// TimelineEvent is one event of an entity as the archive last saw it.
type TimelineEvent struct {
	ID             string      `json:"id"`
	Kind           string      `json:"kind"`
	IdempotencyKey string      `json:"idempotency_key,omitempty"`
	Status         state.State `json:"status"`
	Stage          string      `json:"stage,omitempty"`
	FirstAt        time.Time   `json:"first_at"`
	LastAt         time.Time   `json:"last_at"`
	// Live: its record is still in the state bucket (false once
	// streams.retention has expired it; the archive still has it all).
	Live bool `json:"live"`
}

// AuditEntry is one line of the audit: a step of an event's history
// (EventID set; the fields of state.Entry) or an operator action on an
// account or a breaker (EventID empty; Target, Until, Reason). It is also
// a line of GET /v1/audit/export's JSON Lines.
type AuditEntry struct {
	At       time.Time `json:"at"`
	Account  string    `json:"account"`
	EntityID string    `json:"entity_id,omitempty"`
	EventID  string    `json:"event_id,omitempty"`
	Kind     string    `json:"kind,omitempty"`
	// Step is the entry's place in its event's history (1: the first;
	// state.Record.Step).
	Step       int         `json:"step,omitempty"`
	Action     string      `json:"action"`
	From       state.State `json:"from,omitempty"`
	To         state.State `json:"to,omitempty"`
	Attempt    int         `json:"attempt,omitempty"`
	Stage      string      `json:"stage,omitempty"`
	Actor      string      `json:"actor,omitempty"`
	Detail     string      `json:"detail,omitempty"`
	HTTPStatus int         `json:"http_status,omitempty"`
	Count      int         `json:"count,omitempty"`
	Target     string      `json:"target,omitempty"`
	Until      *time.Time  `json:"until,omitempty"`
	Reason     string      `json:"reason,omitempty"`
}

// ExportRequest selects the audit entries GET /v1/audit/export writes:
// those at Since <= at < Until (Until nil: up to now), of Account or
// EventID when given. Since is required unless EventID is given.
type ExportRequest struct {
	Since   *time.Time `json:"since,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
	Account string     `json:"account,omitempty"`
	EventID string     `json:"event_id,omitempty"`
}
