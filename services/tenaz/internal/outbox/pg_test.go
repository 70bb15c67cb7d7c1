package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"
)

// pg is this test run's throwaway PostgreSQL cluster (TestMain): each
// test gets a database of its own in it (newDB).
var pg *cluster

func TestMain(m *testing.M) {
	c, err := startPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox tests:", err)
		os.Exit(1)
	}
	pg = c
	code := m.Run()
	c.stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// cluster is a postgres server on a unix socket in its own temp dir.
type cluster struct {
	dir    string // data in dir/data, the socket in dir
	cmd    *exec.Cmd
	exited chan error
	log    *lockedBuffer
	dbs    atomic.Int32
}

// postgresBin finds the server's binaries: Debian puts them in
// /usr/lib/postgresql/<version>/bin, off PATH; the newest version wins.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL server: want /usr/lib/postgresql/<version>/bin/initdb or initdb on PATH (Debian's postgresql package; `make test-deps` installs it)")
}

func startPostgres() (*cluster, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tenaz-pg-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, exited: make(chan error, 1), log: &lockedBuffer{}}
	// PostgreSQL refuses to run as root (CI runs as root): there it runs
	// as the postgres user that Debian's package makes.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and PostgreSQL refuses root: want a postgres user to run it as (Debian's postgresql package makes it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "tenaz", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	c.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200")
	// Killed with the test binary, whatever ends it.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child ends:
		// this one lives as long as the server.
		runtime.LockOSThread()
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.exited <- c.cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(context.Background(), c.dsn("postgres"))
		if err == nil {
			_ = conn.Close(context.Background())
			return c, nil
		}
		select {
		case werr := <-c.exited:
			return nil, fmt.Errorf("postgres exited: %v\n%s", werr, c.log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("postgres not ready within 30s: %v\n%s", err, c.log)
		}
	}
}

// dsn is the connection string of database db.
func (c *cluster) dsn(db string) string {
	return fmt.Sprintf("host=%s user=tenaz dbname=%s sslmode=disable", c.dir, db)
}

// stop shuts the server down (fast: connections are closed) and removes
// its files.
func (c *cluster) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.exited:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
	_ = os.RemoveAll(c.dir)
}

// newDB creates an empty database for t and returns its DSN.
func newDB(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("t%d", pg.dbs.Add(1))
	conn, err := pgx.Connect(t.Context(), pg.dsn("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return pg.dsn(name)
}

// lockedBuffer collects a process's output from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
