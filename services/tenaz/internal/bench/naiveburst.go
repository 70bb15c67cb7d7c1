package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenaz/tenaz/pkg/names"
)

// naiveBurst is the burst's reference: raw JetStream doing the same work
// on the same server, with no tenaz. b messages, each on its own schedule
// subject (as tenaz holds each delayed event), are scheduled to fire at
// the same whole second into a work-queue stream; a pull consumer with
// the same number of workers as tenaz's account concurrency does per
// message what Naive does (KV create "running" → HTTP POST to a fake
// provider → KV update "done" with the revision → ack). It returns each
// delivery's lateness at the provider (arrival minus due), in ms, sorted.
func naiveBurst(ctx context.Context, natsURL string, b, workers int) ([]float64, error) {
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	_ = js.DeleteStream(ctx, "NAIVE_BURST")
	_ = js.DeleteKeyValue(ctx, "naive_burst")
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "NAIVE_BURST", Subjects: []string{"naive.sched.>", "naive.fire.>"},
		Retention: jetstream.WorkQueuePolicy, AllowMsgSchedules: true, AllowRollup: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = js.DeleteStream(context.Background(), "NAIVE_BURST") }()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "naive_burst"})
	if err != nil {
		return nil, err
	}
	defer func() { _ = js.DeleteKeyValue(context.Background(), "naive_burst") }()
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: "naive.fire.>", MaxAckPending: 10000})
	if err != nil {
		return nil, err
	}
	prov, provURL, stopProv, err := startProvider()
	if err != nil {
		return nil, err
	}
	defer stopProv()
	url := provURL + "/api/order.create"

	due := time.Now().Add(10 * time.Second).UTC().Truncate(time.Second)
	for i := range b {
		m := nats.NewMsg("naive.sched." + strconv.Itoa(i))
		m.Data = delayedPayload
		m.Header.Set("Nats-Schedule", "@at "+due.Format(time.RFC3339))
		m.Header.Set("Nats-Schedule-Target", "naive.fire."+strconv.Itoa(i))
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		// On a loaded machine the server may lag the async window for more
		// than the default 200 ms: wait for room rather than fail the run.
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
			return nil, fmt.Errorf("naive burst: publish: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if time.Until(due) <= 0 {
		return nil, fmt.Errorf("naive burst: the %d schedules were stored after their due time", b)
	}
	cctx, cancel := context.WithDeadline(ctx, due.Add(3*time.Minute))
	defer cancel()
	iter, err := cons.Messages(jetstream.PullMaxMessages(workers * 4))
	if err != nil {
		return nil, err
	}
	wg := naiveWorkers(cctx, iter, kv, workers, func(ctx context.Context, key string, m jetstream.Msg) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytesReader(m.Data()))
		req.Header.Set(names.HeaderEventID, key)
		if resp, err := httpClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}, nil)
	err = prov.WaitCalls(cctx, b)
	iter.Stop()
	cancel()
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("naive burst: %d of %d delivered within 3m of due: %w", prov.CallCount(), b, err)
	}
	first := map[string]time.Time{}
	for _, c := range prov.Calls() {
		if t, ok := first[c.EventID]; !ok || c.At.Before(t) {
			first[c.EventID] = c.At
		}
	}
	late := make([]float64, 0, len(first))
	for _, at := range first {
		late = append(late, float64(at.Sub(due).Microseconds())/1000)
	}
	sort.Float64s(late)
	return late, nil
}
