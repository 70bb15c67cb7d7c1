package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/ops"
	"github.com/tenaz/tenaz/streams"
)

// Bucket is the accounts bucket under the default prefix
// (streams/data/kv-accounts.json; streams.BucketName gives an
// installation's own). Its keys are account names, each value a stored
// account's definition with its header values sealed.
const Bucket = "tenaz_accounts"

// ErrNotStored is returned by Remove for an account the bucket does not
// hold.
var ErrNotStored = errors.New("the accounts bucket holds no such account")

// ErrNotWatching is returned by Set, List and Remove before Watch.
var ErrNotWatching = errors.New("the accounts bucket is not open in this process")

// Watch opens the accounts bucket (making it as streams.Apply would, so
// that it need not have run first), puts its accounts in force and keeps
// following it until ctx ends. It returns once the bucket's accounts as
// they are now are in force.
func (c *Config) Watch(ctx context.Context, js jetstream.JetStream, layout streams.Options) error {
	bs, err := streams.Buckets(layout)
	if err != nil {
		return err
	}
	name := streams.BucketName(layout.Prefix, Bucket)
	var kv jetstream.KeyValue
	for _, b := range bs {
		if b.Bucket == name {
			if kv, err = js.CreateOrUpdateKeyValue(ctx, b); err != nil {
				return fmt.Errorf("accounts bucket %s: %w", name, err)
			}
		}
	}
	if kv == nil {
		return fmt.Errorf("accounts bucket %s: no definition in streams/data", name)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("accounts bucket %s: watch: %w", name, err)
	}
	c.mu.Lock()
	c.kv = kv
	c.mu.Unlock()
	for e := range w.Updates() {
		if e == nil { // the bucket's values as they are now have all come
			break
		}
		c.mu.Lock()
		c.takeLocked(e)
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.applyLocked()
	c.mu.Unlock()
	go func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				c.mu.Lock()
				c.takeLocked(e)
				c.applyLocked()
				c.mu.Unlock()
			}
		}
	}()
	return nil
}

// takeLocked records one change of the bucket.
func (c *Config) takeLocked(e jetstream.KeyValueEntry) {
	name := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		delete(c.stored, name)
		return
	}
	se := storedEntry{raw: bytes.Clone(e.Value()), rev: e.Revision(), updated: e.Created()}
	se.sa, se.err = c.decode(name, se.raw)
	if se.err != nil {
		c.log.Error().Err(se.err).Str("account", name).Msg("an account of the accounts bucket cannot be read; it is left out, and its events wait until it is fixed")
	}
	c.stored[name] = se
}

// decode opens a bucket value.
func (c *Config) decode(name string, raw []byte) (config.StoredAccount, error) {
	def, err := object(raw)
	if err != nil {
		return config.StoredAccount{}, err
	}
	key := c.file.SealingKeyValue()
	err = eachHeader(def, func(_, _ string, v string) (string, error) { return unseal(key, name, v) })
	if err != nil {
		return config.StoredAccount{}, &config.KeyError{Key: "sealing_key", Msg: err.Error(), Err: err}
	}
	clear, _ := json.Marshal(def)
	return config.ParseStoredAccount(name, clear)
}

// Set adds account to the accounts bucket, or replaces its definition
// there (ops.StoredSetRequest says what a definition holds). The
// definition is checked as the file is, with the file and the bucket's
// other accounts: any problem is an error naming its key (wrapping
// config.ErrInvalidConfig) and nothing is stored. A header value written
// ops.Redacted keeps the value the account has now. It returns the
// account as it reads back, once this process has it in force.
func (c *Config) Set(ctx context.Context, account string, definition json.RawMessage) (ops.StoredAccount, error) {
	if err := config.ValidateAccountName(account); err != nil {
		return ops.StoredAccount{}, err
	}
	def, err := object(definition)
	if err != nil {
		return ops.StoredAccount{}, &config.KeyError{Key: "accounts." + account, Msg: err.Error()}
	}
	c.mu.Lock()
	kv, prev, key := c.kv, c.stored[account], c.file.SealingKeyValue()
	c.mu.Unlock()
	if kv == nil {
		return ops.StoredAccount{}, ErrNotWatching
	}
	var old map[string]any
	if prev.raw != nil {
		old, _ = object(prev.raw)
	}
	err = eachHeader(def, func(t, h, v string) (string, error) {
		hkey := "accounts." + account + ".targets." + t + ".headers." + h
		switch {
		case v == ops.Redacted:
			was, ok := headerOf(old, t, h)
			if !ok {
				return "", &config.KeyError{Key: hkey, Msg: "is " + ops.Redacted + " but the account has no such header to keep: give its value"}
			}
			clear, err := unseal(key, account, was)
			if err != nil {
				return "", &config.KeyError{Key: hkey, Msg: err.Error(), Err: err}
			}
			return clear, nil
		case isSealed(v):
			return "", &config.KeyError{Key: hkey, Msg: "give the header's value in clear; it is sealed when stored"}
		}
		return v, nil
	})
	if err != nil {
		return ops.StoredAccount{}, err
	}
	clear, _ := json.Marshal(def)
	sa, err := config.ParseStoredAccount(account, clear)
	if err != nil {
		return ops.StoredAccount{}, err
	}
	if err := c.check(account, sa); err != nil {
		return ops.StoredAccount{}, err
	}
	err = eachHeader(def, func(t, h, v string) (string, error) {
		s, err := seal(key, account, v)
		if err != nil {
			return "", &config.KeyError{Key: "sealing_key", Msg: err.Error(), Err: err}
		}
		return s, nil
	})
	if err != nil {
		return ops.StoredAccount{}, err
	}
	sealed, _ := json.Marshal(def)
	rev, err := kv.Put(ctx, account, sealed)
	if err != nil {
		return ops.StoredAccount{}, fmt.Errorf("accounts bucket: %w", err)
	}
	c.waitFor(ctx, account, func(e storedEntry, ok bool) bool { return ok && e.rev >= rev })
	return c.one(account)
}

// check refuses a definition that does not fit the file and the bucket's
// other accounts, or that would leave one of those out. With settles a
// clash of key ids or hashes in name order, blaming the account whose
// name or key id sorts later; taken, a newcomer that sorts first would
// evict an account in force, and whoever holds the shared key would
// authenticate as the newcomer.
func (c *Config) check(account string, sa config.StoredAccount) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	others := map[string]config.StoredAccount{}
	for name, e := range c.stored {
		if name != account && e.err == nil {
			others[name] = e.sa
		}
	}
	base := liveOf(c.start, c.file)
	_, before := base.With(others)
	all := maps.Clone(others)
	all[account] = sa
	_, bad := base.With(all)
	if err := bad[account]; err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(bad)) {
		if before[name] == nil {
			return &config.KeyError{Key: "accounts." + account, Msg: fmt.Sprintf("would leave the stored account %s out, which is in force: %v", name, bad[name])}
		}
	}
	return nil
}

// Remove deletes account from the accounts bucket: its keys stop working
// and its limits go back to the "*" entry's.
func (c *Config) Remove(ctx context.Context, account string) error {
	c.mu.Lock()
	kv := c.kv
	_, ok := c.stored[account]
	c.mu.Unlock()
	if kv == nil {
		return ErrNotWatching
	}
	if !ok {
		if _, err := kv.Get(ctx, account); err != nil {
			return fmt.Errorf("%w: %s", ErrNotStored, account)
		}
	}
	if err := kv.Delete(ctx, account); err != nil {
		return fmt.Errorf("accounts bucket: %w", err)
	}
	c.waitFor(ctx, account, func(_ storedEntry, ok bool) bool { return !ok })
	return nil
}

// List returns the bucket's accounts (or just account) as they read back:
// every header value ops.Redacted.
func (c *Config) List(account string) (ops.StoredListReply, error) {
	c.mu.Lock()
	watching := c.kv != nil
	names := make([]string, 0, len(c.stored))
	for name := range c.stored {
		if account == "" || name == account {
			names = append(names, name)
		}
	}
	c.mu.Unlock()
	if !watching {
		return ops.StoredListReply{}, ErrNotWatching
	}
	sort.Strings(names)
	rep := ops.StoredListReply{Items: []ops.StoredAccount{}}
	for _, name := range names {
		if it, err := c.one(name); err == nil {
			rep.Items = append(rep.Items, it)
		}
	}
	return rep, nil
}

// one is account as it reads back.
func (c *Config) one(account string) (ops.StoredAccount, error) {
	c.mu.Lock()
	e, ok := c.stored[account]
	bad := c.status.StoredErrors[account]
	c.mu.Unlock()
	if !ok {
		return ops.StoredAccount{}, fmt.Errorf("%w: %s", ErrNotStored, account)
	}
	it := ops.StoredAccount{Account: account, Revision: e.rev, Updated: e.updated, Error: bad}
	def, err := object(e.raw)
	if err == nil {
		_ = eachHeader(def, func(_, _, _ string) (string, error) { return ops.Redacted, nil })
		it.Definition, _ = json.Marshal(def)
	}
	return it, nil
}

// waitFor waits, within ctx and a few seconds, until this process's view
// of account satisfies done.
func (c *Config) waitFor(ctx context.Context, account string, done func(storedEntry, bool) bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		c.mu.Lock()
		e, ok := c.stored[account]
		c.mu.Unlock()
		if done(e, ok) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// object decodes a JSON object, numbers kept as written.
func object(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, errors.New("must be a JSON object (the limits of an accounts entry and its keys)")
	}
	if dec.More() {
		return nil, errors.New("must be one JSON object")
	}
	return m, nil
}

// eachHeader replaces every header value of a definition
// (targets.<t>.headers.<h>, when a string) by f's answer.
func eachHeader(def map[string]any, f func(target, header, v string) (string, error)) error {
	ts, _ := def["targets"].(map[string]any)
	for _, t := range sortedNames(ts) {
		o, _ := ts[t].(map[string]any)
		hs, _ := o["headers"].(map[string]any)
		for _, h := range sortedNames(hs) {
			v, ok := hs[h].(string)
			if !ok {
				continue // not a string: ParseStoredAccount names it
			}
			nv, err := f(t, h, v)
			if err != nil {
				return err
			}
			hs[h] = nv
		}
	}
	return nil
}

// headerOf is a definition's value of target t's header h.
func headerOf(def map[string]any, t, h string) (string, bool) {
	ts, _ := def["targets"].(map[string]any)
	o, _ := ts[t].(map[string]any)
	hs, _ := o["headers"].(map[string]any)
	v, ok := hs[h].(string)
	return v, ok
}

func sortedNames(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
