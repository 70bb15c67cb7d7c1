// Package config is tenaz.yaml: one documented struct (Config) holding the
// NATS connection, the HTTP listener, per-account limits, the targets
// (external APIs) and the routing of every event kind. Load reads the file,
// substitutes ${ENV} secrets, applies TENAZ_… environment overrides, fills
// defaults and validates, reporting every problem at once with the key it
// is about; services then read it through Account, Kind, TargetFor and
// SchemaFor.
//
//	cfg, err := config.Load("tenaz.yaml")
//	if err != nil {
//		return err // errors.Is(err, config.ErrInvalidConfig); each line names a key
//	}
//	k, ok := cfg.Kind("order.create")
//	if !ok {
//		return errUnknownKind // refused with 422
//	}
//	target := cfg.TargetFor("acme", k.Target) // acme's credentials applied
//	limits := cfg.Account("acme")             // acme over "*" over built-ins
//
// docs/configuration.md documents every key, its default and its
// environment variable.
package config
