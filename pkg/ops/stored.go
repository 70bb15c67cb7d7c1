package ops

import (
	"encoding/json"
	"time"
)

// Endpoints of the accounts kept in the accounts bucket, and of the
// config in force.
const (
	StoredSet    = "accounts.set"
	StoredList   = "accounts.list"
	StoredRemove = "accounts.rm"
	ConfigShow   = "config.status"
)

// Actions on the accounts bucket, as the audit (Action.Action) names them.
const (
	ActionSetAccount    = "set_account"
	ActionRemoveAccount = "remove_account"
)

// Redacted stands for a secret in a StoredAccount read back: a sealed
// header value is never shown, in clear or sealed.
const Redacted = "[redacted]"

// StoredSetRequest adds an account to the accounts bucket, or replaces
// its definition there. Definition is the JSON of an accounts.<name>
// entry of tenaz.yaml (rate, concurrency, breaker, targets with their
// url and headers; not repeats) with a "keys" member holding its API
// keys as auth.keys entries ({"<id>": {"scopes": [...], "hash":
// "sha256:…", "rate": …}}; a key's account is the stored account's
// own). Header values are given in clear and stored sealed.
type StoredSetRequest struct {
	Account    string          `json:"account"`
	Definition json.RawMessage `json:"definition"`
	// Reason is why (required), recorded in the audit.
	Reason string `json:"reason"`
}

// StoredRemoveRequest removes an account from the accounts bucket: its
// keys stop working and its limits go back to the "*" entry's.
type StoredRemoveRequest struct {
	Account string `json:"account"`
	// Reason is why (required), recorded in the audit.
	Reason string `json:"reason"`
}

// StoredListRequest lists the accounts of the accounts bucket (or one).
type StoredListRequest struct {
	Account string `json:"account,omitempty"`
}

// StoredAccount is an account of the accounts bucket as it reads back:
// its definition with every header value Redacted.
type StoredAccount struct {
	Account    string          `json:"account"`
	Definition json.RawMessage `json:"definition"`
	// Revision is the bucket's revision of the definition.
	Revision uint64 `json:"revision"`
	// Updated is when the definition was last set.
	Updated time.Time `json:"updated"`
	// Error, when set, says why the definition is not in force (the
	// file declares the account too, or it no longer fits the file).
	Error string `json:"error,omitempty"`
}

// StoredListReply lists stored accounts, sorted by account.
type StoredListReply struct {
	Items []StoredAccount `json:"items"`
}

// ConfigStatus is the config in force in the process that answers, and
// how its last reload went.
type ConfigStatus struct {
	// File is the config file reloaded on SIGHUP or change ("" for none).
	File string `json:"file,omitempty"`
	// AppliedAt is when the config in force was made (start-up, a reload,
	// a change of the accounts bucket).
	AppliedAt time.Time `json:"applied_at"`
	// ReloadedAt is when the file was last read on a reload; zero when it
	// has not been since start-up.
	ReloadedAt time.Time `json:"reloaded_at,omitzero"`
	// OK is false when the last reload of the file was refused: Errors
	// says why, and the config before it is still in force.
	OK bool `json:"ok"`
	// Errors are the last refused reload's problems, each naming its key.
	Errors []string `json:"errors,omitempty"`
	// Restart lists the top-level keys the file changes that apply only
	// on a restart: they keep the value they started with.
	Restart []string `json:"restart,omitempty"`
	// Stored lists the accounts of the accounts bucket in force.
	Stored []string `json:"stored,omitempty"`
	// StoredErrors gives, by account, why an account of the bucket is
	// not in force.
	StoredErrors map[string]string `json:"stored_errors,omitempty"`
}
