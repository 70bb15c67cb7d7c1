// Package owner gives each account exactly one owner among the live
// replicas of the dispatcher, so that an account's limits (concurrency,
// rate, breaker failures) are counted in one process and hold however many
// replicas run.
//
// A replica joins a Group: it puts a heartbeat in the tenaz_owners bucket
// and watches everyone else's. The accounts are spread over the live
// replicas by rendezvous hashing (Assigned), so a replica that joins or
// leaves moves only its share. Owning an account also needs its lease
// (Acquire), one key per account that names the holder: a replica takes
// it when it is free or its holder is dead, and gives it back (Release)
// only after its last call for the account returned. Two replicas never
// hold one account at a time, even while their views of who is alive
// differ for a heartbeat or two. A guest (a poller: Options.Guest) says
// it is alive and holds no account, so that what it holds of a shared
// limit (pkg/quota) counts while it lives.
//
//	g, err := owner.Join(ctx, js, owner.Options{Instance: "d-1", OnChange: reconcile}) // reconcile(owner.Change)
//	if g.Assigned(acct) { ok, since, err := g.Acquire(ctx, acct) … } // since: for the pace
//	defer g.Leave(ctx)
package owner
