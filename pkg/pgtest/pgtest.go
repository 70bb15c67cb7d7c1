// Package pgtest starts a real, throwaway PostgreSQL server for tests: a
// new cluster (initdb) in a temporary directory, reached on a unix socket
// only, with trust authentication for the user "tenaz", removed on Stop.
// It needs the server's binaries (Debian's postgresql package, which
// `make test-deps` installs) and nothing else: no Go driver, so a test
// picks its own.
//
//	pg, err := pgtest.Start() // in TestMain, or per test with t.Cleanup(pg.Stop)
//	dsn := pg.NewDB(t)        // an empty database of t's own
package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// User is the superuser of the cluster, trusted on its socket.
const User = "tenaz"

// Server is a running postgres on a unix socket in its own directory.
type Server struct {
	bin    string // the server's binaries
	dir    string // data in dir/data, the socket in dir
	cmd    *exec.Cmd
	exited chan error
	log    *os.File // the server's output, in dir
	dbs    atomic.Int32
	once   sync.Once
}

// binDir finds the server's binaries: Debian puts them in
// /usr/lib/postgresql/<version>/bin, off PATH; the newest version wins.
func binDir() (string, error) {
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

// Start creates a cluster and starts its server; it returns once the
// server accepts connections. The server is killed with the process that
// started it, however that ends.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tenaz-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir, exited: make(chan error, 1)}
	// PostgreSQL refuses to run as root (CI runs as root): there it runs
	// as the postgres user that Debian's package makes.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, and PostgreSQL refuses root: want a postgres user to run it as (Debian's postgresql package makes it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", User, "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", dir, "-c", "listen_addresses=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "max_connections=200")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	// A file, not a buffer: the server writes it itself, and Log reads it
	// while it does.
	if s.log, err = os.Create(filepath.Join(dir, "postgres.log")); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child ends:
		// this one lives as long as the server.
		runtime.LockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.exited <- s.cmd.Wait()
	}()
	if err := <-started; err != nil {
		_ = s.log.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := s.client("pg_isready", "-d", "postgres").CombinedOutput()
		if err == nil {
			return s, nil
		}
		select {
		case werr := <-s.exited:
			s.exited <- werr // for Stop
			log := s.Log()
			s.Stop()
			return nil, fmt.Errorf("postgres exited: %v\n%s", werr, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log := s.Log()
			s.Stop()
			return nil, fmt.Errorf("postgres not ready within 30s: %v %s\n%s", err, out, log)
		}
	}
}

// client is one of the server's client programs, connecting to it.
func (s *Server) client(name string, args ...string) *exec.Cmd {
	return exec.Command(filepath.Join(s.bin, name), append([]string{"-h", s.dir, "-U", User}, args...)...)
}

// DSN is the connection string (libpq keyword form) of database db.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("host=%s user=%s dbname=%s sslmode=disable", s.dir, User, db)
}

// NewDB creates an empty database for tb and returns its DSN.
func (s *Server) NewDB(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("t%d", s.dbs.Add(1))
	if out, err := s.client("createdb", name).CombinedOutput(); err != nil {
		tb.Fatalf("createdb %s: %v\n%s", name, err, out)
	}
	return s.DSN(name)
}

// Log is what the server has written so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.log.Name())
	return string(b)
}

// Stop shuts the server down (fast: connections are closed) and removes
// its files. Idempotent.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		_ = s.log.Close()
		_ = os.RemoveAll(s.dir)
	})
}
