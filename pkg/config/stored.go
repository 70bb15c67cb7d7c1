package config

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"sort"
	"strings"

	"github.com/tenaz/tenaz/pkg/event"
)

// SealingKeyBytes is the length sealing_key must decode to (AES-256).
const SealingKeyBytes = 32

// StoredAccount is an account kept in the accounts bucket rather than in
// tenaz.yaml: the same limits and target overrides as an accounts.<name>
// entry (repeats excepted), and the account's API keys. Its JSON is an
// accounts.<name> entry with a "keys" member holding auth.keys entries.
type StoredAccount struct {
	// Account is the account's limits and target overrides.
	Account Account
	// Keys are the account's API keys by id; each key's account is the
	// stored account's own.
	Keys map[string]APIKey
}

// ParseStoredAccount decodes the JSON of a stored account, strictly and
// with the key paths of the file ("accounts.<name>.rate",
// "auth.keys.<id>.hash"): an unknown key or a value of the wrong type is
// an error naming it. A ${…} reference is refused (a stored value is
// never taken from the server's environment). It does not check the
// values against the rest of the config: With does.
func ParseStoredAccount(name string, data []byte) (StoredAccount, error) {
	if err := ValidateAccountName(name); err != nil {
		return StoredAccount{}, err
	}
	members, dup, err := event.Members(data)
	if dup != "" {
		return StoredAccount{}, &KeyError{Key: join(join("accounts", name), dup), Msg: "is given twice"}
	}
	if err != nil {
		return StoredAccount{}, &KeyError{Key: join("accounts", name), Msg: "must be a JSON object (the limits of an accounts entry and its keys): " + err.Error()}
	}
	keys := members["keys"]
	delete(members, "keys")
	if _, ok := members["repeats"]; ok {
		return StoredAccount{}, &KeyError{Key: join(join("accounts", name), "repeats"), Msg: "is not taken from the accounts bucket: declare repeats in tenaz.yaml or with PUT /v1/repeats/{account}/{name}"}
	}
	acct, _ := json.Marshal(members)
	if len(keys) == 0 {
		keys = json.RawMessage("{}")
	}
	quoted, _ := json.Marshal(name)
	doc := `{"accounts":{` + string(quoted) + `:` + string(acct) + `},"auth":{"keys":` + string(keys) + `}}`
	cfg := Config{explicitZero: map[string]bool{}}
	if err := decodeInto(&cfg, []byte(doc), nil); err != nil {
		// The lines are the document's this builds around the definition,
		// not the sender's: one line.
		for _, e := range unjoin(err) {
			if ke, ok := e.(*KeyError); ok {
				ke.Line = 0
			}
		}
		return StoredAccount{}, err
	}
	n := name
	sa := StoredAccount{Account: cfg.Accounts[n], Keys: cfg.Auth.Keys}
	var errs []error
	for _, t := range sorted(sa.Account.Targets) {
		if sa.Account.Targets[t].CallbackSecret != "" {
			// A replica of an earlier version reads the bucket too, and
			// would leave the whole account out for a key it does not
			// know: the account's own url and headers with it.
			errs = append(errs, &KeyError{Key: join(join("accounts", n), "targets."+t+".callback_secret"), Msg: "is set in tenaz.yaml only, not in the accounts bucket"})
		}
	}
	for _, id := range sorted(sa.Keys) {
		k := sa.Keys[id]
		switch k.Account {
		case "":
			k.Account = n
			sa.Keys[id] = k
		case n:
		default:
			errs = append(errs, &KeyError{Key: join(join("auth.keys", id), "account"), Msg: "must be " + n + ", the stored account's own, or left out"})
		}
	}
	return sa, joinSorted(errs)
}

// ValidateAccountName checks the name of an account entry (not "*").
func ValidateAccountName(name string) error {
	if name == DefaultAccountName || !token(name) {
		return &KeyError{Key: join("accounts", name), Msg: "an account name must be 1-64 characters of [A-Za-z0-9_-]"}
	}
	return nil
}

// With returns c with the stored accounts merged in, and why any of them
// was left out. The file wins: a stored account the file also declares
// is left out, as is one whose API key id the file (or another stored
// account) uses. The rest are checked as the file is (Validate); a
// stored account with a problem is left out with its errors, and the
// others still apply. c must be valid; c itself is not changed.
func (c *Config) With(stored map[string]StoredAccount) (*Config, map[string]error) {
	bad := map[string]error{}
	ok := map[string]StoredAccount{}
	owner := map[string]string{}
	hashOf := map[string]string{} // a key's hash → where it is in force
	for id, k := range c.Auth.Keys {
		owner[id] = ""
		hashOf[k.Hash] = "tenaz.yaml's " + join("auth.keys", id)
	}
	for name, o := range c.Auth.Operators {
		hashOf[o.Hash] = "tenaz.yaml's " + join("auth.operators", name)
	}
	for _, name := range sorted(stored) {
		sa := stored[name]
		if _, inFile := c.Accounts[name]; inFile {
			bad[name] = &KeyError{Key: join("accounts", name), Msg: "is declared in tenaz.yaml, whose entry is in force: remove it from the file or from the accounts bucket"}
			continue
		}
		var errs []error
		if c.Auth.Disabled && len(sa.Keys) > 0 {
			errs = append(errs, &KeyError{Key: "auth.keys", Msg: "auth.disabled is true: the stored account's API keys would never be checked; remove them or turn auth on"})
		}
		for _, id := range sorted(sa.Keys) {
			if o, taken := owner[id]; taken {
				where := "tenaz.yaml"
				if o != "" {
					where = "the stored account " + o
				}
				errs = append(errs, &KeyError{Key: join("auth.keys", id), Msg: "is already a key id of " + where})
			}
			// The same key twice is refused (Validate), and that error
			// would be tenaz.yaml's when its entry sorts later: every
			// stored account would be left out for one account's key.
			if where, taken := hashOf[sa.Keys[id].Hash]; taken {
				errs = append(errs, &KeyError{Key: join(join("auth.keys", id), "hash"), Msg: "is the same key as " + where + ": each key must be different"})
			}
		}
		if len(errs) > 0 {
			bad[name] = joinSorted(errs)
			continue
		}
		for id, k := range sa.Keys {
			owner[id] = name
			hashOf[k.Hash] = "the stored account " + name + "'s " + join("auth.keys", id)
		}
		ok[name] = sa
	}
	for len(ok) > 0 {
		m := c.merged(ok)
		err := m.Validate()
		if err == nil {
			return m, bad
		}
		// Give each error to the stored account it is about, and leave
		// those out; an error about none of them leaves them all out.
		errsOf := map[string][]error{}
		for _, e := range unjoin(err) {
			name := ownerOf(keyOf(e), ok)
			if name == "" {
				for n := range ok {
					bad[n] = err
				}
				return c, bad
			}
			errsOf[name] = append(errsOf[name], e)
		}
		for name, errs := range errsOf {
			bad[name] = joinSorted(errs)
			delete(ok, name)
		}
	}
	return c, bad
}

// Leaving returns c with the stored accounts of bad that the file does
// not declare left out (LeftOut), with their errors. c is not changed.
func (c *Config) Leaving(bad map[string]error) *Config {
	m := *c
	m.LeftOut = nil
	for name, err := range bad {
		if _, inFile := c.Accounts[name]; inFile {
			continue
		}
		if m.LeftOut == nil {
			m.LeftOut = map[string]string{}
		}
		m.LeftOut[name] = err.Error()
	}
	return &m
}

// merged is c with the stored accounts added: a copy whose maps are its
// own, so that c stays as it is.
func (c *Config) merged(stored map[string]StoredAccount) *Config {
	m := *c
	m.Accounts = maps.Clone(c.Accounts)
	m.Auth.Keys = maps.Clone(c.Auth.Keys)
	if m.Auth.Keys == nil {
		m.Auth.Keys = map[string]APIKey{}
	}
	for name, sa := range stored {
		m.Accounts[name] = sa.Account
		for id, k := range sa.Keys {
			m.Auth.Keys[id] = k
		}
	}
	return &m
}

// ownerOf is the stored account an error's key path is about: its
// accounts entry, or one of its API keys.
func ownerOf(key string, stored map[string]StoredAccount) string {
	for _, name := range sortedKeys(stored) {
		a := join("accounts", name)
		if key == a || strings.HasPrefix(key, a+".") {
			return name
		}
		for id := range stored[name].Keys {
			k := join("auth.keys", id)
			if key == k || strings.HasPrefix(key, k+".") {
				return name
			}
		}
	}
	return ""
}

func sortedKeys(m map[string]StoredAccount) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// unjoin lists the errors an errors.Join holds (err itself otherwise).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if _, isKey := err.(*KeyError); !isKey {
			return j.Unwrap()
		}
	}
	return []error{err}
}

// SealingKeyValue returns sealing_key's 32 bytes, or nil when it is unset.
func (c *Config) SealingKeyValue() []byte {
	k, err := base64.StdEncoding.DecodeString(c.SealingKey.Reveal())
	if err != nil || len(k) != SealingKeyBytes {
		return nil
	}
	return k
}

func (v *validator) sealingKey() {
	s := v.c.SealingKey.Reveal()
	if s == "" {
		return
	}
	if k, err := base64.StdEncoding.DecodeString(s); err != nil || len(k) != SealingKeyBytes {
		v.add("sealing_key", "must be the standard base64 of %d random bytes, e.g. \"$(openssl rand -base64 32)\"", SealingKeyBytes)
	}
}
