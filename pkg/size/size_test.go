package size_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/dead"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/size"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// esc is a character JSON writes as six bytes (\u003c) where it escapes
// HTML, as the record encoder does: the worst case of every text.
const esc = "<"

func worst(n int) string { return strings.Repeat(esc, n) }

const stockMaxPayload = 1 << 20 // nats-server's default max_payload

// The largest record, EVENTS message, INTAKE message and DEAD entry of an
// event whose payload is the largest that fits (every text at its bound
// and of the worst characters, the history full) fit a stock nats-server:
// each is stored, and each is at most its payload plus size.Overhead.
func TestOverheadBoundsEveryMessage(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.MaxPayload(stockMaxPayload))
	nc, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fit, l := size.MaxBody(nc)
	if fit != stockMaxPayload-size.Overhead {
		t.Fatalf("want %d bytes to fit a stock server, got %d (%s)", stockMaxPayload-size.Overhead, fit, l.What)
	}
	payload := json.RawMessage(`"` + worst(int(fit)-2) + `"`)
	account, kind := strings.Repeat("a", names.MaxAccountLen), strings.Repeat("k", names.MaxKindLen)
	key := worst(names.MaxKeyLen)
	id, next := event.ID(account, key), event.ID(account, key+"x")
	far := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("x", 12*3600))
	env := event.Envelope{ID: id, IdempotencyKey: key, Account: account, Kind: kind, EntityID: key, OrderingKey: key,
		NotBefore: &far, CreatedAt: far, Payload: payload}

	rec, _, err := state.New(state.Record{ID: id, IdempotencyKey: key, Account: account, Kind: kind, EntityID: key, OrderingKey: key,
		Payload: payload, After: next, Next: next}, state.Action{Name: state.Accept, Actor: worst(state.MaxName), Detail: worst(state.MaxDetail)}, far)
	if err != nil {
		t.Fatal(err)
	}
	step := func(a state.Action) {
		t.Helper()
		a.Actor = worst(2 * state.MaxName)
		if rec, _, err = state.Apply(rec, a, far); err != nil {
			t.Fatalf("%s: %v", a.Name, err)
		}
	}
	big := &state.ErrorInfo{Class: worst(2 * state.MaxName), Message: worst(2 * state.MaxDetail), HTTPStatus: 599}
	step(state.Action{Name: state.Claim, Seq: math.MaxUint64})
	step(state.Action{Name: state.Retry, Error: big, NextRunAt: &far})
	step(state.Action{Name: state.Claim, Seq: math.MaxUint64})
	step(state.Action{Name: state.Poll, Reference: worst(state.MaxReference), NextRunAt: &far, Deadline: &far, Detail: worst(2 * state.MaxDetail)})
	for i := range 3 * state.MaxHistory {
		step(state.Action{Name: state.Note, Detail: strconv.Itoa(i) + worst(2*state.MaxDetail)})
		step(state.Action{Name: state.Repoll, NextRunAt: &far, Detail: worst(2 * state.MaxDetail)})
	}
	rec.Result = json.RawMessage(`"` + worst(state.MaxResult-2) + `"`) // a JSON result at its bound
	rec.Attempts, rec.Polls, rec.Truncated = math.MaxInt, math.MaxInt, math.MaxInt

	within := func(what string, n int) {
		t.Helper()
		extra := int64(n) - int64(len(payload))
		t.Logf("%s: %d bytes beyond its payload", what, extra)
		if extra > size.Overhead-1024 { // 1 KiB for the headers
			t.Errorf("%s: %d bytes beyond its payload, want at most %d", what, extra, size.Overhead-1024)
		}
	}
	within("record", len(rec.AppendJSON(nil)))
	st, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, rec); err != nil {
		t.Errorf("want the largest record stored, got %v", err)
	}

	within("EVENTS message", len(env.Marshal()))
	evSubj, _ := names.NewSubjects("").Event(account, kind)
	m := nats.NewMsg(evSubj)
	m.Data = env.Marshal()
	m.Header.Set(nats.MsgIdHdr, id+"/primary/1")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Errorf("want the largest EVENTS message stored, got %v", err)
	}
	subj, _ := names.NewSubjects("").Intake(account, kind)
	m = nats.NewMsg(subj)
	m.Data = payload
	for _, h := range []string{names.HeaderIdempotencyKey, names.HeaderEntityID, names.HeaderOrderingKey, names.HeaderMsgID, "Tenaz-Reply", "Tenaz-Reply-Seal"} {
		m.Header.Set(h, key)
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Errorf("want the largest INTAKE message stored, got %v", err)
	}

	e := dead.Entry{ID: id, Account: account, Kind: kind, Reason: dead.ReasonTooLarge, Class: worst(2 * state.MaxName),
		Error: worst(2 * state.MaxDetail), Status: 599, At: far, Event: &env, Record: &rec}
	if err := (&dead.Writer{JS: js, Subj: names.NewSubjects("")}).Publish(ctx, e, id+"/dead/1"); err != nil {
		t.Fatalf("want the largest DEAD entry stored, got %v", err)
	}
	stream, err := js.Stream(ctx, names.StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := stream.GetLastMsgForSubject(ctx, names.NewSubjects("").DeadAll())
	if err != nil {
		t.Fatal(err)
	}
	within("DEAD entry", len(stored.Data))
}

// Check refuses, naming the key and the figure that would fit, a
// max_body_bytes one byte over what the server carries, and takes the
// figure itself.
func TestCheckRefusesABodyThatDoesNotFit(t *testing.T) {
	t.Parallel()
	const maxPayload = 512 << 10
	srv := natstest.Start(t, natstest.MaxPayload(maxPayload))
	nc, _ := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fit := int64(maxPayload - size.Overhead)
	if err := size.Check(ctx, nc, fit); err != nil {
		t.Fatalf("want %d accepted, got %v", fit, err)
	}
	err := size.Check(ctx, nc, fit+1)
	if !errors.Is(err, config.ErrInvalidConfig) {
		t.Fatalf("want a config error, got %v", err)
	}
	for _, want := range []string{"http.max_body_bytes", fmt.Sprintf("at most %d fit", fit), "the server's max_payload is 524288", "raise the server's max_payload"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want the error to say %q, got %v", want, err)
		}
	}
}

// IsTooLarge knows NATS's two refusals, and the store says
// size.ErrTooLarge for both: the client's own check against the server's
// max_payload, and JetStream's for a stream's limit (the state bucket's
// max_value_size, 1 MiB, under the test server's 8 MiB).
func TestIsTooLarge(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, js := srv.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "tenaz.intake.a.k", make([]byte, nc.MaxPayload()+1)); !size.IsTooLarge(err) {
		t.Errorf("over max_payload: want too large, got %v", err)
	}
	st, err := store.Open(ctx, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{nc.MaxPayload() + 1, 1<<20 + 1} {
		rec := state.Record{ID: event.ID("a", fmt.Sprint(n)), Payload: json.RawMessage(`"` + strings.Repeat("x", int(n)) + `"`)}
		if _, err := st.Create(ctx, rec); !errors.Is(err, size.ErrTooLarge) {
			t.Errorf("record of %d bytes: want size.ErrTooLarge, got %v", n, err)
		}
		p, err := st.CreateAsync(rec)
		if err == nil {
			_, err = p.Wait(ctx)
		}
		if !errors.Is(err, size.ErrTooLarge) {
			t.Errorf("record of %d bytes, created async: want size.ErrTooLarge, got %v", n, err)
		}
	}
	if size.IsTooLarge(errors.New("nats: timeout")) || size.IsTooLarge(nil) {
		t.Error("want other errors not taken for too large")
	}
}
