// Package tenaz is `tenaz run` (System): the four services (ingest,
// dispatcher, poller, deadletter) in one process, on one HTTP listener,
// with an embedded nats-server on file storage when no NATS URL is
// configured, and the demo provider when the config asks for it.
//
//	st, err := tenaz.New(tenaz.Options{Config: cfg, Logger: &log})
//	err = st.Start(ctx)
//	defer st.Stop(ctx)
package tenaz
