package chaos

import (
	"fmt"
	"os"
	"time"
)

// The targets, each one fake provider shared by every account (the gate in
// front of them takes one account down at a time).
const (
	targetERP     = "erp"      // sync deliveries
	targetBureauA = "bureau_a" // accepts, answers later by a signed webhook
	targetBureauB = "bureau_b" // accepts, must be polled
)

var targets = []string{targetERP, targetBureauA, targetBureauB}

// The kinds of the run, one per completion path.
const (
	kindOrder    = "order.create"    // sync at erp
	kindLane     = "order.update"    // sync at erp, ordered by the payload's lane
	kindEvaluate = "credit.evaluate" // callback at bureau_a; no callback in time → fallback (poll at bureau_b)
	kindCheck    = "credit.check"    // callback at bureau_a; no callback in time → manual review
	kindReport   = "report.fetch"    // poll at bureau_b
	// callback at bureau_a, ordered by the payload's lane (with
	// order.update); no callback in time → manual review
	kindLaneCallback = "credit.ordered"
)

// callbackSecret verifies bureau_a's webhooks (a test value).
const callbackSecret = "whsec_Y2hhb3MtYnVyZWF1LWEtd2ViaG9vay1zZWNyZXQ="

// callTimeout is every target's call timeout; the providers' hangs last
// longer, so a hanging call is a client timeout.
const callTimeout = 2 * time.Second

// Every process of the run gets its own instance name in envInstance
// (the process's name and its start count), and every target call carries
// it in headerInstance, so that the limit checks can tell which dispatcher
// process lifetime made each call: an account served by two of them at once
// (a handover) shows.
const (
	envInstance    = "TENAZ_CHAOS_INSTANCE"
	headerInstance = "X-Chaos-Instance"
)

// accountConcurrency is every account's concurrency (but narrowAccount's):
// at most that many calls of one account in flight, over all dispatchers.
const accountConcurrency = 8

// Two accounts get limits of their own, so that the limit checks have
// something to bite on: rated's calls are held to ratedPerSecond, and
// narrow's concurrency is narrowConcurrency. Both are within what the
// run's load needs of them (about 8 events/s per account in the short run,
// some two calls each), so that they throttle without keeping events from
// settling within the bound.
const (
	ratedAccount      = "acct-01"
	ratedPerSecond    = 10
	narrowAccount     = "acct-02"
	narrowConcurrency = 4
)

// bureauBConcurrency is bureau_b's concurrency, over every account: its
// calls (report.fetch, credit fallbacks) and its polls share it, over
// every dispatcher and poller.
const bureauBConcurrency = 12

// breakerFailures opens a breaker: with 30 % 5xx and 10 % timeouts a run
// of ten failures is rare outside an outage or a 429 burst.
const breakerFailures = 10

// probeTimeout is what the dispatcher gives a breaker probe claim
// (the call timeout + 10s); see the breaker check.
const probeTimeout = callTimeout + 10*time.Second

// ackWait is streams.ack_wait: an account's tail hands a message out
// again after it (a call cut short by a lost run), and so does the
// poller's consumer a timer.
const ackWait = 6 * time.Second

type configParams struct {
	providers   string // base URL of the providers, "http://127.0.0.1:port"
	cooldown    time.Duration
	callbackSLA time.Duration
	pollSLA     time.Duration
	logLevel    string
}

func secs(d time.Duration) string { return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second)) }

// tenazYAML is the run's tenaz.yaml. The NATS URL and each process's HTTP
// address come from the environment (NATS_URL, TENAZ_HTTP_ADDR). The
// reconciler's sweep is effectively off (reconcile_every 24h): every event
// must settle on its own path, and the one sweep the check runs at the end
// must find nothing to repair.
func tenazYAML(p configParams) string {
	backoff := "{initial: 1s, max: 8s, multiplier: 2, jitter: 0.2, max_retry_after: 10s}"
	return fmt.Sprintf(`# tenaz-chaos: generated for one run
log: {format: json, level: %[7]s}
auth: {disabled: true}
streams: {ack_wait: %[6]s}
poller: {concurrency: 32, reconcile_every: 24h, grace: 15s, running_grace: 10m}
accounts:
  "*": {concurrency: %[11]d, breaker: {failures: %[8]d, cooldown: %[2]s}}
  %[12]s: {rate: %[13]d/s}
  %[14]s: {concurrency: %[15]d}
targets:
  erp:
    url: "%[1]s/{{.Account}}/erp/api/{{.Kind}}"
    timeout: %[9]s
    headers: {`+headerInstance+`: "${`+envInstance+`}"}
  bureau_a:
    url: "%[1]s/{{.Account}}/bureau_a/proposals"
    timeout: %[9]s
    headers: {`+headerInstance+`: "${`+envInstance+`}"}
    callback_secret: "%[10]s"
    callback: {done_when: {field: status, in: [approved, rejected]}}
  bureau_b:
    url: "%[1]s/{{.Account}}/bureau_b/evaluations"
    timeout: %[9]s
    concurrency: %[16]d
    headers: {`+headerInstance+`: "${`+envInstance+`}"}
    poll:
      url: "%[1]s/{{.Account}}/bureau_b/evaluations/{{.Reference}}"
      interval: 1s
      done_when: {field: status, in: [approved, rejected]}
kinds:
  order.create: {target: erp, attempts: 8, backoff: %[5]s, entity: order_id}
  order.update: {target: erp, attempts: 8, backoff: %[5]s, entity: order_id, ordered_by: lane}
  credit.evaluate:
    target: bureau_a
    completion: callback
    attempts: 4
    backoff: %[5]s
    callback_sla: %[3]s
    on_callback_timeout: fallback
    fallback: {target: bureau_b, completion: poll, attempts: 6, backoff: %[5]s, poll_sla: %[4]s}
  credit.check:
    target: bureau_a
    completion: callback
    attempts: 4
    backoff: %[5]s
    callback_sla: %[3]s
    on_callback_timeout: manual_review
    fallback: {target: bureau_b, completion: poll, attempts: 6, backoff: %[5]s, poll_sla: %[4]s}
  report.fetch: {target: bureau_b, completion: poll, attempts: 8, backoff: %[5]s, poll_sla: %[4]s}
  credit.ordered:
    target: bureau_a
    completion: callback
    attempts: 4
    backoff: %[5]s
    callback_sla: %[3]s
    on_callback_timeout: manual_review
    ordered_by: lane
`, p.providers, secs(p.cooldown), secs(p.callbackSLA), secs(p.pollSLA), backoff, secs(ackWait), p.logLevel,
		breakerFailures, secs(callTimeout), callbackSecret, accountConcurrency,
		ratedAccount, ratedPerSecond, narrowAccount, narrowConcurrency, bureauBConcurrency)
}

func writeConfig(path string, p configParams) error {
	return os.WriteFile(path, []byte(tenazYAML(p)), 0o600)
}
