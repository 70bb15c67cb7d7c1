package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/pkg/state"
)

// Tokens of the subject's fourth place that are not an entity's.
const (
	// NoEntity stands for the entity of events submitted without one.
	NoEntity = "_"
	// OpsToken holds the operator actions on an account and its breakers.
	OpsToken = "ops"
)

// EntityToken is entity's subject token: "e" and 32 hex digits of its
// SHA-256, whatever the id holds (dots, wildcards, any length); NoEntity
// for "". Messages carry the id itself, so a reader checks it.
func EntityToken(entity string) string {
	if entity == "" {
		return NoEntity
	}
	sum := sha256.Sum256([]byte(entity))
	return "e" + hex.EncodeToString(sum[:16])
}

func root(prefix string) string {
	if prefix == "" {
		prefix = names.DefaultPrefix
	}
	return prefix + ".audit"
}

// Subject is the subject of an event's revisions.
func Subject(prefix, account, entity, id string) string {
	return root(prefix) + "." + account + "." + EntityToken(entity) + "." + id
}

// EntityFilter matches every revision of the events of one entity.
func EntityFilter(prefix, account, entity string) string {
	return root(prefix) + "." + account + "." + EntityToken(entity) + ".*"
}

// EventFilter matches every revision of one event, whatever its account
// and entity.
func EventFilter(prefix, id string) string { return root(prefix) + ".*.*." + id }

// AccountFilter matches everything of one account ("": of every account).
func AccountFilter(prefix, account string) string {
	if account == "" {
		return root(prefix) + ".>"
	}
	return root(prefix) + "." + account + ".>"
}

// OpsSubject is the subject of an operator action on account, n making it
// unique (its time in nanoseconds).
func OpsSubject(prefix, account string, n int64) string {
	return root(prefix) + "." + account + "." + OpsToken + "." + strconv.FormatInt(n, 10)
}

// OpsFilter matches the operator actions on account.
func OpsFilter(prefix, account string) string {
	return root(prefix) + "." + account + "." + OpsToken + ".*"
}

// IsOps reports whether subject holds an operator action.
func IsOps(subject string) bool {
	t := strings.Split(subject, ".")
	return len(t) >= 3 && t[len(t)-2] == OpsToken
}

// Revision is one message of an event: the record as one revision left it
// and the history entries it added to the archive.
type Revision struct {
	ID             string      `json:"id"`
	Account        string      `json:"account"`
	Kind           string      `json:"kind"`
	EntityID       string      `json:"entity_id,omitempty"`
	IdempotencyKey string      `json:"idempotency_key,omitempty"`
	Status         state.State `json:"status"`
	Stage          string      `json:"stage,omitempty"`
	// Revision is the record's revision in its state bucket.
	Revision uint64 `json:"revision"`
	// Step is the record's Step: Entries are steps Step-len(Entries)+1
	// to Step.
	Step    int           `json:"step"`
	Entries []state.Entry `json:"entries"`
}

// Mark is what the archive holds of an event: the Step of its last
// message and the Count of that message's last entry (a run of repolls
// grows the count of one entry without a new step).
type Mark struct {
	Step, Count int
}

// MarkOf is the mark a message leaves.
func MarkOf(r Revision) Mark {
	m := Mark{Step: r.Step}
	if n := len(r.Entries); n > 0 {
		m.Count = r.Entries[n-1].Count
	}
	return m
}

// Diff is the message revision rev of rec adds to an archive whose last
// message of the event left last (the zero Mark: none yet); ok is false
// when it adds nothing (a redelivery, or a revision an earlier message
// already covered). A revision missed in between (the bucket keeps one
// revision per key) costs nothing: the record's history has its entries.
func Diff(rec state.Record, rev uint64, last Mark) (Revision, bool) {
	step, h := rec.Step(), rec.History
	k := min(step-last.Step, len(h)) // entries added since
	if k < 0 {
		return Revision{}, false
	}
	from := len(h) - k
	// The entry the last message ended with may have grown its count.
	if from > 0 && last.Step > 0 && h[from-1].Count > last.Count {
		from--
	}
	if from == len(h) {
		return Revision{}, false
	}
	return Revision{ID: rec.ID, Account: rec.Account, Kind: rec.Kind, EntityID: rec.EntityID, IdempotencyKey: rec.IdempotencyKey,
		Status: rec.Status, Stage: rec.Stage, Revision: rev, Step: step, Entries: h[from:]}, true
}

// ErrNotAudit is Decode's error for a message that is neither.
var ErrNotAudit = errors.New("audit: not an audit message")

// Decode reads one archive message into its entries: a revision's history
// entries, or an operator action.
func Decode(subject string, data []byte) ([]ops.AuditEntry, error) {
	if IsOps(subject) {
		var a ops.Action
		if err := json.Unmarshal(data, &a); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNotAudit, subject, err)
		}
		e := ops.AuditEntry{At: a.At, Account: a.Account, Action: a.Action, Actor: a.Actor, Target: a.Target, Until: a.Until, Reason: a.Reason}
		if a.Seq != 0 {
			e.Detail = fmt.Sprintf("DEAD #%d: %s", a.Seq, a.Entry)
		}
		return []ops.AuditEntry{e}, nil
	}
	var r Revision
	if err := json.Unmarshal(data, &r); err != nil || r.ID == "" {
		return nil, fmt.Errorf("%w: %s: %v", ErrNotAudit, subject, err)
	}
	out := make([]ops.AuditEntry, len(r.Entries))
	first := r.Step - len(r.Entries) + 1
	for i, e := range r.Entries {
		out[i] = ops.AuditEntry{At: e.At, Account: r.Account, EntityID: r.EntityID, EventID: r.ID, Kind: r.Kind, Step: first + i,
			Action: string(e.Action), From: e.From, To: e.To, Attempt: e.Attempt, Stage: e.Stage, Actor: e.Actor,
			Detail: e.Detail, HTTPStatus: e.HTTPStatus, Count: e.Count}
	}
	return out, nil
}
