package bench

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/tracing"
	"github.com/tenaz/tenaz/pkg/tracing/tracingtest"
)

// tracingEnv turns tracing on for the bench's "on" rounds: OTLP over
// HTTP to the local receiver, every span sampled (the default), and a
// span queue deep enough that none is dropped, so that every span's
// export is paid for.
func tracingEnv(endpoint string) map[string]string {
	return map[string]string{
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
		"OTEL_BSP_MAX_QUEUE_SIZE":     "262144",
		"OTEL_BSP_SCHEDULE_DELAY":     "200",
		"OTEL_SERVICE_NAME":           "tenaz-bench",
	}
}

// Tracing measures what tracing costs: throughput rounds of the same
// tenaz on the same server with tracing off and on (its spans exported
// over OTLP/HTTP to a receiver in this process that decodes them), in
// alternating order; medians of each and their ratio.
func Tracing(ctx context.Context, sz Sizes, r Report, concurrency int) error {
	target, err := startNoop()
	if err != nil {
		return err
	}
	defer target.srv.Close()
	recv := tracingtest.Counter()
	defer recv.Close()
	_, tz, stop, err := startPhase(ctx, "tenaz-bench-*", false, func(url string) (*config.Config, error) {
		return BenchConfig(url, target.url, concurrency)
	})
	if err != nil {
		return err
	}
	defer stop(ctx)
	// A whole round in flight: on a loaded machine the default bound
	// (4,000 unacknowledged publishes) stalls the load, not tenaz.
	if tz.js, err = jetstream.New(tz.nc, jetstream.WithPublishAsyncMaxPending(sz.Events+1)); err != nil {
		return err
	}
	if _, err := tz.Throughput(ctx, "tracing-warmup", sz.Events/10); err != nil {
		return err
	}
	n := sz.Events
	var off, on, offCPU, onCPU []float64
	spans := 0
	for round := range sz.Rounds {
		for _, traced := range []bool{round%2 == 0, round%2 != 0} {
			stop := func(context.Context) error { return nil }
			if traced {
				if stop, err = setupTracing(ctx, recv.URL); err != nil {
					return err
				}
			}
			before := recv.Count()
			c0 := cpuTime()
			v, err := tz.Throughput(ctx, fmt.Sprintf("tracing-%v-%d", traced, round), n)
			if err != nil {
				return err
			}
			cpu := float64((cpuTime() - c0).Microseconds()) / float64(n)
			// The spans still queued are flushed outside the timing.
			if err := stop(ctx); err != nil {
				return fmt.Errorf("tracing: flushing spans: %w", err)
			}
			if traced {
				on, onCPU = append(on, v), append(onCPU, cpu)
				spans += recv.Count() - before
			} else {
				off, offCPU = append(off, v), append(offCPU, cpu)
			}
		}
	}
	if bad := recv.Refused(); len(bad) > 0 {
		return fmt.Errorf("tracing: the receiver refused exports: %v", bad[0])
	}
	r.Figure("e2e_events_per_s_tracing_off", median(off), "events/s")
	r.Figure("e2e_events_per_s_tracing_on", median(on), "events/s")
	r.Figure("e2e_ratio_tracing_on_vs_off", median(on)/median(off), "ratio")
	r.Figure("e2e_cpu_us_per_event_tracing_off", median(offCPU), "us")
	r.Figure("e2e_cpu_us_per_event_tracing_on", median(onCPU), "us")
	r.Figure("e2e_spans_per_event_tracing_on", float64(spans)/float64(n*len(on)), "spans")
	return nil
}

// setupTracing turns tracing on as an operator would, with tracingEnv;
// the variables are restored at once (the provider has read them).
func setupTracing(ctx context.Context, endpoint string) (func(context.Context) error, error) {
	for k, v := range tracingEnv(endpoint) {
		old, had := os.LookupEnv(k)
		_ = os.Setenv(k, v)
		if had {
			defer os.Setenv(k, old)
		} else {
			defer os.Unsetenv(k)
		}
	}
	stop, err := tracing.Setup(ctx, "tenaz-bench", nil)
	if err == nil && !tracing.Enabled() {
		err = fmt.Errorf("tracing: not on with %v", tracingEnv(endpoint))
	}
	return stop, err
}
