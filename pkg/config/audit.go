package config

import "time"

// Audit sets the audit archive: every transition of every event and every
// operator action, kept in its own stream (TENAZ_AUDIT) for as long as the
// business must answer for it, whatever streams.retention keeps the
// records.
type Audit struct {
	// Retention is how long the archive keeps an entry (the stream's
	// max_age). Defaults to 9600h (400 days).
	Retention Duration `yaml:"retention"`
}

const defaultAuditRetention = Duration(400 * 24 * time.Hour)

func (a *Audit) withDefaults() { setDur(&a.Retention, defaultAuditRetention) }

func (v *validator) audit() { v.positive("audit.retention", v.c.Audit.Retention) }
