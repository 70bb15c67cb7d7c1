package queue

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Pull are the options of a service's Consume that buffers at most n
// messages. nats.go's Consume can lose track of its pull: when a batch
// is handled while its next pull request is still being sent (a loaded
// CPU), it sends none, the server holds no request of it, and it pulls
// again only once it has missed two heartbeats: 30 s at the defaults,
// during which the consumer delivers nothing (the poller's timers of
// every account, in TestCrowdedAccountLeavesTheAckWindowToOthers under
// CI load). A 1 s heartbeat, in pulls of 5 s, bounds that to 2 s, for a
// heartbeat a second per consumer.
func Pull(n int) []jetstream.PullConsumeOpt {
	return []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(n), jetstream.PullExpiry(pullExpiry), jetstream.PullHeartbeat(time.Second)}
}

// pullExpiry is how long a pull request waits at the server.
const pullExpiry = 5 * time.Second
