// Package poller completes events over time. It handles the timers the
// dispatcher schedules, fired by the server onto each partition's timer
// subjects (<prefix>.timers.>, <prefix>.p<N>.timers.>) and shared by every
// replica through one durable consumer per partition: a poll asks the
// target whether a job is done (complete, repoll, or manual review at the
// poll SLA); a callback deadline moves an event still awaiting its webhook
// to manual review or its fallback stage. Its reconciler (one replica per
// period) sweeps every record and repairs an event left without a next
// step.
//
//	svc, err := poller.New(poller.Options{Conn: nc, Config: cfg})
//	err = svc.Start(ctx)
//	defer svc.Stop(ctx)
package poller
