package outbox_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/tenaz/tenaz/pkg/pgtest"
)

// pg is this test run's throwaway PostgreSQL server (TestMain): each test
// gets a database of its own in it (newDB).
var pg *pgtest.Server

func TestMain(m *testing.M) {
	s, err := pgtest.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox tests:", err)
		os.Exit(1)
	}
	pg = s
	code := m.Run()
	s.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newDB creates an empty database for t and returns its DSN.
func newDB(t *testing.T) string { return pg.NewDB(t) }
