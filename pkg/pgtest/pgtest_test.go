package pgtest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenaz/tenaz/pkg/pgtest"
)

// TestStartNewDBStop starts a server, makes two databases that psql can
// use, and checks that Stop removes the cluster's files.
func TestStartNewDBStop(t *testing.T) {
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Stop)
	a, b := pg.NewDB(t), pg.NewDB(t)
	if a == b {
		t.Fatalf("NewDB gave one DSN twice: %s", a)
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatalf("psql: %v (Debian's postgresql package brings it)", err)
	}
	for _, dsn := range []string{a, b} {
		out, err := exec.Command(psql, dsn, "-Atc", "SELECT current_database()").CombinedOutput()
		if err != nil {
			t.Fatalf("psql %s: %v\n%s\n%s", dsn, err, out, pg.Log())
		}
		if want := strings.TrimPrefix(strings.Fields(dsn)[2], "dbname="); strings.TrimSpace(string(out)) != want {
			t.Errorf("connected to %q, want %q", out, want)
		}
	}
	dir := strings.TrimPrefix(strings.Fields(a)[0], "host=")
	pg.Stop()
	if _, err := os.Stat(filepath.Join(dir, "data")); !os.IsNotExist(err) {
		t.Errorf("after Stop, %s/data: %v, want it gone", dir, err)
	}
	pg.Stop() // idempotent
}
