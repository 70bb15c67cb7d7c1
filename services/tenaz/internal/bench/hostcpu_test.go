package bench

import "testing"

func TestHostBusyShare(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	before := parseProcStat("cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 1 2 3\n")
	after := parseProcStat("cpu  400 0 150 900 150 0 0 0 90 0\n")
	if !before.ok || !after.ok {
		t.Fatalf("a well-formed line was not read: %+v %+v", before, after)
	}
	// 400 busy ticks (user 300, system 100) of 600; guest time is in user
	// time already, iowait is not busy.
	if got, ok := before.busyPct(after); !ok || got < 66.6 || got > 66.7 {
		t.Fatalf("busy share %.2f%% (%v), want 66.67%%", got, ok)
	}
	if _, ok := after.busyPct(before); ok {
		t.Fatal("a sample taken earlier gave a share")
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu 1 x 3 4 5\n", "cpu 1 2\n"} {
		if h := parseProcStat(bad); h.ok {
			t.Fatalf("%q read as a sample: %+v", bad, h)
		}
	}
}
