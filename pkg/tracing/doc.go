// Package tracing follows one event through every tenaz service as one
// OpenTelemetry trace. The W3C traceparent a submitter sends (HTTP header
// or NATS header) becomes the parent of the event's accept span; the
// accept span's own context is kept in the envelope and the record
// (Traceparent), so every later step — each attempt, each poll, each
// callback — is its child, whichever process takes it, and every call to a
// target carries it on.
//
// Tracing is off unless the standard OTEL_* variables name an exporter
// (Setup). Off, no tracer provider is installed and the span functions
// return at once: a submitter's traceparent is still kept and sent to the
// target, and its trace id still goes in the logs.
//
//	stop, err := tracing.Setup(ctx, "tenaz-dispatcher", &log)
//	defer stop(context.Background())
//	ctx, span := tracing.Attempt(ctx, env, attempt, stage, target)
//	defer span.End()
//	tracing.Inject(ctx, req.Header, env.Traceparent)
package tracing
