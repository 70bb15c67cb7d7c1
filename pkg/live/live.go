package live

import (
	"crypto/sha256"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/metrics"
	"github.com/tenaz/tenaz/pkg/ops"
)

// Options configure a Config.
type Options struct {
	// Path is the config file to reload; "" for none (Reload then only
	// re-applies the accounts bucket).
	Path string
	// Logger defaults to a disabled logger.
	Logger *zerolog.Logger
	// Every is how often Run looks whether the file changed. Defaults to
	// 2s.
	Every time.Duration
}

// Config is the config in force: read it with Load, per call. Safe for
// concurrent use.
type Config struct {
	o   Options
	log zerolog.Logger
	cur atomic.Pointer[config.Config]

	mu      sync.Mutex
	start   *config.Config // as the process started: what cannot change live
	file    *config.Config // the file as last loaded without error
	fileSum [sha256.Size]byte
	stored  map[string]storedEntry // the accounts bucket, opened and decoded
	status  ops.ConfigStatus
	subs    []func(*config.Config)
	kv      jetstream.KeyValue
}

// storedEntry is one account of the bucket as this process read it.
type storedEntry struct {
	sa      config.StoredAccount
	raw     []byte // the bucket's value (sealed)
	rev     uint64
	updated time.Time
	err     error // why it could not be read; sa is then unset
}

// New returns the live config, cfg in force. cfg must be valid (Load
// or Parse); it is the start: what cannot change live keeps its values.
func New(cfg *config.Config, o Options) *Config {
	if o.Every <= 0 {
		o.Every = 2 * time.Second
	}
	log := zerolog.Nop()
	if o.Logger != nil {
		log = o.Logger.With().Str("component", "config").Logger()
	}
	c := &Config{o: o, log: log, start: cfg, file: cfg, stored: map[string]storedEntry{}}
	if o.Path != "" {
		if b, err := os.ReadFile(o.Path); err == nil {
			c.fileSum = sha256.Sum256(b)
		}
	}
	c.status = ops.ConfigStatus{File: o.Path, AppliedAt: time.Now(), OK: true}
	c.cur.Store(cfg)
	return c
}

// Static is the live config of cfg alone, never reloaded: what a
// service built without a Config of its process's uses.
func Static(cfg *config.Config) *Config { return New(cfg, Options{}) }

// Load returns the config in force. Do not keep it across calls: a
// reload makes another.
func (c *Config) Load() *config.Config { return c.cur.Load() }

// OnChange calls f with every config put in force from now on, in order,
// after Load returns it. f must be quick and must not call OnChange.
func (c *Config) OnChange(f func(*config.Config)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs = append(c.subs, f)
}

// Status is the config in force and how its last reload went.
func (c *Config) Status() ops.ConfigStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.status
	s.Errors = slices.Clone(s.Errors)
	s.Restart = slices.Clone(s.Restart)
	s.Stored = slices.Clone(s.Stored)
	if s.StoredErrors != nil {
		m := make(map[string]string, len(s.StoredErrors))
		for k, v := range s.StoredErrors {
			m[k] = v
		}
		s.StoredErrors = m
	}
	return s
}

// Reload reads the config file again and puts what can change live in
// force. A file with any problem is refused: the error lists them all
// (each naming its key, wrapping config.ErrInvalidConfig), they are logged
// and kept in Status, and the config in force does not change.
func (c *Config) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.o.Path == "" {
		c.applyLocked()
		return nil
	}
	now := time.Now()
	c.status.ReloadedAt = now
	b, err := os.ReadFile(c.o.Path)
	if err != nil {
		return c.refuseLocked(fmt.Errorf("config file %s: %w", c.o.Path, err))
	}
	c.fileSum = sha256.Sum256(b)
	nf, err := config.Load(c.o.Path)
	if err != nil {
		return c.refuseLocked(err)
	}
	m := liveOf(c.start, nf)
	if err := m.Validate(); err != nil {
		return c.refuseLocked(fmt.Errorf("config file %s: with what it cannot change until a restart: %w", c.o.Path, err))
	}
	if m.Auth.Enabled() && !m.Auth.Configured() {
		return c.refuseLocked(&config.KeyError{Key: "auth.keys", Msg: "no API keys and no operators are left: the HTTP API would refuse everyone"})
	}
	rekeyed := nf.SealingKey != c.file.SealingKey
	c.file = nf
	if rekeyed { // the bucket's sealed values open with the new key only
		for name, e := range c.stored {
			e.sa, e.err = c.decode(name, e.raw)
			c.stored[name] = e
		}
	}
	c.status.OK, c.status.Errors = true, nil
	c.status.Restart = restartKeys(c.start, nf)
	c.applyLocked()
	metrics.Default.ConfigReloaded(true, now)
	ev := c.log.Info().Str("file", c.o.Path)
	if len(c.status.Restart) > 0 {
		ev = c.log.Warn().Str("file", c.o.Path).Strs("restart", c.status.Restart)
	}
	ev.Msg("config reloaded; keys listed under restart keep their old value until a restart")
	return nil
}

// refuseLocked records a refused reload: the config in force stays.
func (c *Config) refuseLocked(err error) error {
	c.status.OK = false
	c.status.Errors = strings.Split(err.Error(), "\n")
	metrics.Default.ConfigReloaded(false, time.Time{})
	c.log.Error().Str("file", c.o.Path).Strs("errors", c.status.Errors).Msg("config reload refused; the config in force is unchanged")
	return err
}

// applyLocked puts in force the file's live part merged with the bucket,
// and tells the subscribers.
func (c *Config) applyLocked() {
	stored := map[string]config.StoredAccount{}
	for name, e := range c.stored {
		if e.err == nil {
			stored[name] = e.sa
		}
	}
	m, bad := liveOf(c.start, c.file).With(stored)
	for name, e := range c.stored {
		if e.err != nil {
			bad[name] = e.err
		}
	}
	m = m.Leaving(bad)
	c.status.Stored = nil
	for name := range stored {
		if bad[name] == nil {
			c.status.Stored = append(c.status.Stored, name)
		}
	}
	sort.Strings(c.status.Stored)
	c.status.StoredErrors = nil
	for name, err := range bad {
		if c.status.StoredErrors == nil {
			c.status.StoredErrors = map[string]string{}
		}
		c.status.StoredErrors[name] = err.Error()
	}
	metrics.Default.ConfigStored(len(c.status.Stored), len(bad))
	c.status.AppliedAt = time.Now()
	if reflect.DeepEqual(c.cur.Load(), m) {
		// The same config again (a watch delivers the bucket's values
		// again after every reconnect): what was built from it stays.
		return
	}
	c.cur.Store(m)
	for _, f := range c.subs {
		f(m)
	}
}

// liveOf is start with what file may change live.
func liveOf(start, file *config.Config) *config.Config {
	m := *start
	m.Accounts = file.Accounts
	m.Targets = file.Targets
	disabled := start.Auth.Disabled
	m.Auth = file.Auth
	m.Auth.Disabled = disabled
	m.SealingKey = file.SealingKey
	return &m
}

// liveKeys are the top-level keys a reload takes (see liveOf).
var liveKeys = []string{"accounts", "targets", "auth", "sealing_key"}

// restartKeys lists what file changes of start that liveOf does not take.
func restartKeys(start, file *config.Config) []string {
	var out []string
	a, b := reflect.ValueOf(start).Elem(), reflect.ValueOf(file).Elem()
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || slices.Contains(liveKeys, name) {
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, name)
		}
	}
	if start.Auth.Disabled != file.Auth.Disabled {
		out = append(out, "auth.disabled")
	}
	names := map[string]bool{}
	for n := range start.Accounts {
		names[n] = true
	}
	for n := range file.Accounts {
		names[n] = true
	}
	for n := range names {
		if !reflect.DeepEqual(start.Accounts[n].Repeats, file.Accounts[n].Repeats) && len(start.Accounts[n].Repeats)+len(file.Accounts[n].Repeats) > 0 {
			out = append(out, "accounts."+n+".repeats")
		}
	}
	sort.Strings(out)
	return out
}
