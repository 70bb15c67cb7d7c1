package search

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tenaz/tenaz/pkg/directget"
	"github.com/tenaz/tenaz/pkg/event"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/pkg/natstest"
	"github.com/tenaz/tenaz/pkg/state"
	"github.com/tenaz/tenaz/pkg/store"
)

// A revision the feed delivered while behind is passed over when its
// event's record has a later revision: the feed brings that one, with the
// whole history. One whose event is at that revision still, one not
// delivered behind, one whose event was deleted since, and any when the
// read fails, are followed.
func TestLatestPassesOverSupersededRevisions(t *testing.T) {
	t.Parallel()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := natstest.Start(t)
	_, js := srv.Conn(t)
	st, err := store.Open(c, js, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	subj := names.NewSubjects("").WithPartitions(st.Partitions())
	x := NewIndexer(js, subj, IndexerOptions{})
	if x.gets, err = directget.New(js.Conn()); err != nil {
		t.Fatal(err)
	}
	defer x.gets.Close()

	// Four events whose records share a partition, as one fetch's do.
	const account = "acme"
	var ids []string
	bucket := ""
	for i := 0; len(ids) < 4; i++ {
		id := event.ID(account, fmt.Sprintf("k%d", i))
		if bucket == "" {
			bucket = st.Bucket(account, id)
		}
		if st.Bucket(account, id) == bucket {
			ids = append(ids, id)
		}
	}
	p := -1
	for i := range st.Partitions() {
		if subj.StateBucketOf(i) == bucket {
			p = i
		}
	}
	if p < 0 {
		t.Fatalf("no partition has bucket %s", bucket)
	}
	moved, current, notBehind, deleted := ids[0], ids[1], ids[2], ids[3]
	revs := make([]Revision, 0, len(ids))
	behind := map[string]int{}
	for _, id := range ids {
		r, _, err := state.New(state.Record{ID: id, IdempotencyKey: id, Account: account, Kind: "order.create"}, state.Action{Name: state.Accept}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		seq, err := st.Create(c, r)
		if err != nil {
			t.Fatal(err)
		}
		if id != notBehind {
			behind["$KV."+bucket+"."+id] = len(revs)
		}
		revs = append(revs, Revision{Record: r, Seq: seq})
	}
	for _, id := range []string{moved, notBehind} {
		if _, _, _, err := st.Transition(c, account, id, state.Action{Name: state.Claim, Seq: 1}); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := js.KeyValue(c, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(c, deleted); err != nil {
		t.Fatal(err)
	}

	idsOf := func(revs []Revision) []string {
		var out []string
		for _, r := range revs {
			out = append(out, r.Record.ID)
		}
		return out
	}
	failed, stop := context.WithCancel(c)
	stop()
	if got := idsOf(x.latest(failed, p, slices.Clone(revs), behind)); !slices.Equal(got, ids) {
		t.Fatalf("a failed read: followed %v, want all of %v", got, ids)
	}
	if got, want := idsOf(x.latest(c, p, revs, behind)), []string{current, notBehind, deleted}; !slices.Equal(got, want) {
		t.Fatalf("followed %v, want %v (%s passed over)", got, want, moved)
	}
	if s := x.Stats(); s.Superseded != 1 || s.Revisions != 7 {
		t.Fatalf("stats %+v, want 1 superseded and 7 revisions followed (4, then 3)", s)
	}
}
