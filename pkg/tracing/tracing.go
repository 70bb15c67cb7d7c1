package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tenaz/tenaz/pkg/event"
)

// Span is an OpenTelemetry span, as the span functions return it.
type Span = trace.Span

// Header is the W3C Trace Context header, on HTTP requests and NATS
// messages alike.
const Header = "traceparent"

// Span names.
const (
	SpanAccept   = "tenaz.accept"   // ingest makes the submission an event (record, EVENTS)
	SpanAttempt  = "tenaz.attempt"  // one call of the target by the dispatcher, and its outcome
	SpanPoll     = "tenaz.poll"     // one poll of the target by the poller
	SpanCallback = "tenaz.callback" // one webhook of the target applied (or noted) by ingest
)

// Attribute keys of tenaz's spans (besides http.response.status_code).
const (
	AttrEventID   = attribute.Key("tenaz.event_id")
	AttrAccount   = attribute.Key("tenaz.account")
	AttrKind      = attribute.Key("tenaz.kind")
	AttrAttempt   = attribute.Key("tenaz.attempt")
	AttrStage     = attribute.Key("tenaz.stage")
	AttrTarget    = attribute.Key("tenaz.target")
	AttrPoll      = attribute.Key("tenaz.poll")
	AttrWebhookID = attribute.Key("tenaz.webhook_id")
	// AttrOutcome: for an attempt the verdict (done, retry, fallback,
	// dead); for a poll done, pending, error or expired; for a callback
	// the answer (applied, duplicate, late, …); for an accept created or
	// duplicate.
	AttrOutcome = attribute.Key("tenaz.outcome")
	// AttrClass is the outcome class (pkg/outcome: success, transient,
	// permanent, timeout).
	AttrClass  = attribute.Key("tenaz.class")
	attrStatus = attribute.Key("http.response.status_code")
)

// scope is the instrumentation scope of tenaz's spans.
const scope = "github.com/tenaz/tenaz"

// on holds the tracer while a provider is installed; nil is off, and
// every span function returns after this one load.
var on atomic.Pointer[trace.Tracer]

// Enabled reports whether Setup installed a tracer provider.
func Enabled() bool { return on.Load() != nil }

// Wanted reports whether the environment asks for traces:
// OTEL_TRACES_EXPORTER names an exporter other than "none", and
// OTEL_SDK_DISABLED is not true. Unlike the specification's default
// (otlp), an unset OTEL_TRACES_EXPORTER is off: tracing is opt-in.
func Wanted() bool {
	if disabled, _ := strconv.ParseBool(os.Getenv("OTEL_SDK_DISABLED")); disabled {
		return false
	}
	e := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	return e != "" && e != "none"
}

// Setup installs, when Wanted, a tracer provider exporting through the
// exporter the OTEL_* variables configure (autoexport:
// OTEL_TRACES_EXPORTER otlp or console, OTEL_EXPORTER_OTLP_PROTOCOL
// http/protobuf by default or grpc, OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_TRACES_SAMPLER, OTEL_BSP_*, …) as the global one, with service as
// service.name unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say
// otherwise. Export errors go to log (when not nil). stop flushes what is
// left and uninstalls it; when tracing is not wanted, nothing is installed
// and stop does nothing.
func Setup(ctx context.Context, service string, log *zerolog.Logger) (stop func(context.Context) error, err error) {
	stop = func(context.Context) error { return nil }
	if !Wanted() {
		return stop, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return stop, fmt.Errorf("tracing: %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return stop, nil
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return stop, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if log != nil {
		l := log.With().Str("component", "tracing").Logger()
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { l.Warn().Err(err).Msg("traces not exported") }))
	}
	t := tp.Tracer(scope)
	on.Store(&t)
	return func(ctx context.Context) error {
		on.Store(nil)
		otel.SetTracerProvider(noop.NewTracerProvider())
		return tp.Shutdown(ctx)
	}, nil
}

// From reads a traceparent with get (an http.Header's or nats.Header's
// Get) and returns it in canonical form, or "" when there is none or it
// is not a valid W3C traceparent (which the standard says to ignore).
func From(get func(string) string) string {
	v := get(Header)
	if v == "" {
		v = get("Traceparent") // the canonical form of HTTP, sent as is over NATS
	}
	if v == "" {
		return ""
	}
	sc := parse(v)
	if !sc.IsValid() {
		return ""
	}
	return format(sc)
}

// TraceID is the trace id of a traceparent in the canonical form
// (From, or a span's), "" for anything else.
func TraceID(tp string) string {
	if len(tp) != 55 || tp[2] != '-' || tp[35] != '-' {
		return ""
	}
	return tp[3:35]
}

// Log returns l with the trace_id of tp, or l itself when tp has none.
func Log(l zerolog.Logger, tp string) zerolog.Logger {
	if id := TraceID(tp); id != "" {
		return l.With().Str("trace_id", id).Logger()
	}
	return l
}

// Inject sets the traceparent of a call to a target: the current span's
// (the attempt's or the poll's) when tracing is on, else stored, the
// event's own (a submitter's, kept while tracing is off), if any.
func Inject(ctx context.Context, h http.Header, stored string) {
	if on.Load() != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			h.Set(Header, format(sc))
			return
		}
	}
	if stored != "" {
		h.Set(Header, stored)
	}
}

// Remote returns ctx carrying the span context of the traceparent get
// reads (an incoming request's), for Callback to link to; ctx itself when
// tracing is off or there is none.
func Remote(ctx context.Context, get func(string) string) context.Context {
	if on.Load() == nil {
		return ctx
	}
	if sc := parse(get(Header)); sc.IsValid() {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// Accept starts the accept span of env, a child of the traceparent its
// submitter sent (env.Traceparent, or a new trace), and makes
// env.Traceparent the span's own: the record and every message built
// from env from then on carry it. Off, env is left as it is.
func Accept(ctx context.Context, env *event.Envelope) (context.Context, trace.Span) {
	t := on.Load()
	if t == nil {
		return ctx, noop.Span{}
	}
	ctx, sp := (*t).Start(withParent(ctx, env.Traceparent), SpanAccept, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(AttrEventID.String(env.ID), AttrAccount.String(env.Account), AttrKind.String(env.Kind)))
	env.Traceparent = format(sp.SpanContext())
	return ctx, sp
}

// Attempt starts the span of one attempt at env's target (or Go
// handler), a child of the event's accept span; Record adds its outcome.
func Attempt(ctx context.Context, env event.Envelope, attempt int, stage, target string) (context.Context, trace.Span) {
	return targetSpan(ctx, env, SpanAttempt, AttrAttempt.Int(attempt), stage, target)
}

// Poll starts the span of the poll-th poll of env's target, a child of
// the event's accept span; Record adds its outcome.
func Poll(ctx context.Context, env event.Envelope, poll int, stage, target string) (context.Context, trace.Span) {
	return targetSpan(ctx, env, SpanPoll, AttrPoll.Int(poll), stage, target)
}

// targetSpan starts the client span name of one call of env's target
// (n is the call's number: attempt or poll), a child of the event's
// accept span.
func targetSpan(ctx context.Context, env event.Envelope, name string, n attribute.KeyValue, stage, target string) (context.Context, trace.Span) {
	t := on.Load()
	if t == nil {
		return ctx, noop.Span{}
	}
	return (*t).Start(withParent(ctx, env.Traceparent), name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrEventID.String(env.ID), AttrAccount.String(env.Account), AttrKind.String(env.Kind),
			n, AttrStage.String(stage), AttrTarget.String(target)))
}

// Callback records the span of one webhook from target, from began until
// now: a child of the event's accept span (tp, the record's; a webhook
// for no known event has none), linked to the sender's own span when its
// request carried one (see Remote).
func Callback(ctx context.Context, tp string, began time.Time, eventID, target, webhookID, outcome string) {
	t := on.Load()
	if t == nil {
		return
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(began),
		trace.WithAttributes(AttrEventID.String(eventID), AttrTarget.String(target), AttrWebhookID.String(webhookID), AttrOutcome.String(outcome))}
	if sender := trace.SpanContextFromContext(ctx); sender.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sender}))
		if tp == "" {
			tp = format(sender) // no event to join: the sender's trace
		}
	}
	_, sp := (*t).Start(withParent(ctx, tp), SpanCallback, opts...)
	sp.End()
}

// Result is the outcome of the step a span is for.
type Result struct {
	Outcome    string // see AttrOutcome
	Class      string // outcome class; "" or success is no error
	HTTPStatus int    // the target's answer, 0 for none
	Error      string // what went wrong (as recorded in the event's history)
}

// Record adds r to the span in ctx (Attempt's, Poll's, Accept's); a
// class other than success marks the span as an error.
func Record(ctx context.Context, r Result) {
	if on.Load() == nil {
		return
	}
	sp := trace.SpanFromContext(ctx)
	if !sp.IsRecording() {
		return
	}
	sp.SetAttributes(AttrOutcome.String(r.Outcome))
	if r.Class != "" {
		sp.SetAttributes(AttrClass.String(r.Class))
	}
	if r.HTTPStatus > 0 {
		sp.SetAttributes(attrStatus.Int(r.HTTPStatus))
	}
	if r.Class != "" && r.Class != "success" {
		sp.SetStatus(codes.Error, r.Error)
	}
}

// withParent makes tp the parent of the next span started from ctx; with
// no valid tp that span starts a new trace.
func withParent(ctx context.Context, tp string) context.Context {
	if tp != "" {
		if sc := parse(tp); sc.IsValid() {
			return trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	return ctx
}

// parse reads a traceparent: the canonical form (what format writes, so
// what envelopes carry) directly, anything else with the W3C propagator.
func parse(tp string) trace.SpanContext {
	if tp == "" {
		return trace.SpanContext{}
	}
	if len(tp) == 55 && tp[:3] == "00-" && tp[35] == '-' && tp[52] == '-' {
		tid, terr := trace.TraceIDFromHex(tp[3:35])
		sid, serr := trace.SpanIDFromHex(tp[36:52])
		flags, ferr := strconv.ParseUint(tp[53:], 16, 8)
		if terr == nil && serr == nil && ferr == nil && strings.ToLower(tp) == tp {
			return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
				TraceFlags: trace.TraceFlags(flags) & trace.FlagsSampled, Remote: true})
		}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{Header: tp})
	return trace.SpanContextFromContext(ctx)
}

// format writes sc as a version 00 traceparent, whose only flag is
// sampled: a later version's other flags (kept by the propagator) are not
// version 00's to carry.
func format(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + (sc.TraceFlags() & trace.FlagsSampled).String()
}
