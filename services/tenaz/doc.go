// Package standalone is `tenaz run`: the four services (ingest,
// dispatcher, poller, deadletter) in one process, on one HTTP listener,
// with an embedded nats-server on file storage when no NATS URL is
// configured, and the demo provider when the config asks for it.
//
//	st, err := standalone.New(standalone.Options{Config: cfg, Logger: &log})
//	err = st.Start(ctx)
//	defer st.Stop(ctx)
package standalone
