package queue_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tenaz/tenaz/pkg/queue"
)

// A message's record revision is good only in the epoch it was written in:
// a migration moves records to other buckets, where the same number may be
// another revision.
func TestRevOfOnlyInItsEpoch(t *testing.T) {
	cases := []struct {
		header, epoch string
		rev           uint64
		ok            bool
	}{
		{"42", "", 42, true},
		{"42 m1", "m1", 42, true},
		{"42", "m1", 0, false},    // written before the migration
		{"42 m1", "m2", 0, false}, // before the last of two
		{"42 m1", "", 0, false},
		{"", "", 0, false},
		{"0", "", 0, false},
		{"x", "", 0, false},
		{"-1 m1", "m1", 0, false},
	}
	for _, c := range cases {
		h := nats.Header{}
		if c.header != "" {
			h.Set(queue.HeaderRev, c.header)
		}
		rev, ok := queue.RevOf(h, c.epoch)
		if rev != c.rev || ok != c.ok {
			t.Errorf("RevOf(%q) in epoch %q = %d, %v; want %d, %v", c.header, c.epoch, rev, ok, c.rev, c.ok)
		}
	}
}
