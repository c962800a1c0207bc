// Package redisserver starts a real redis-server for tests (DESIGN.md §8):
// on a free loopback port, in a temporary directory, with persistence off
// (--save "" --appendonly no). Stop, Kill and Restart (on the same port)
// let outage tests take Redis away and bring it back.
//
// Without the redis-server binary on PATH, Start skips the test with a
// message naming `apt-get install -y redis-server`; with
// GEMINIGUARD_REQUIRE_REDIS=1 in the environment (as .ci/run sets it) it
// fails the test instead.
package redisserver

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns a missing redis-server
// from a skip into a failure.
const RequireEnv = "GEMINIGUARD_REQUIRE_REDIS"

// startTimeout bounds how long a redis-server may take to say it is ready,
// and how long Stop waits for it to exit before killing it.
const startTimeout = 10 * time.Second

// Server is a redis-server process owned by one test. Its methods are safe
// for concurrent use; it is stopped by the test's cleanup.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args []string // extra redis-server arguments

	mu     sync.Mutex // guards cmd and exited
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited; nil when none runs
}

// Start starts a redis-server for t on a free loopback port and stops it in
// t's cleanup; args are more redis-server arguments (for instance
// "--cluster-enabled", "yes"). It skips t when the binary is missing (fails
// it when GEMINIGUARD_REQUIRE_REDIS=1) and fails t when the server does not
// start.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-server not found (%v) and %s=1: apt-get install -y redis-server", err, RequireEnv)
		}
		t.Skipf("redis-server not found: apt-get install -y redis-server to run this test (%s=1 makes this a failure)", RequireEnv)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: args}
	t.Cleanup(s.Stop)
	// A free port may be taken between finding it and redis-server binding
	// it; try a few.
	for try := 0; ; try++ {
		s.port, err = freePort()
		if err == nil {
			err = s.start()
		}
		if err == nil {
			return s
		}
		if try == 2 {
			t.Fatalf("redisserver: %v", err)
		}
	}
}

// Addr returns the server's host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Stop shuts the server down (SIGTERM, then SIGKILL if it lingers) and
// waits for it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.end(syscall.SIGTERM)
}

// Kill kills the server at once (SIGKILL), as a crash would, and waits for
// it to exit.
func (s *Server) Kill() {
	s.end(syscall.SIGKILL)
}

// Restart starts the server again on the same port after Stop or Kill; it
// stops a running one first. The data is gone: persistence is off.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.t.Fatalf("redisserver: restart: %v", err)
	}
}

func (s *Server) end(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd, s.exited = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// start runs redis-server on s.port and waits until it accepts connections.
func (s *Server) start() error {
	out := &readyWriter{ready: make(chan struct{})}
	cmd := exec.Command(s.bin, append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--loglevel", "notice",
		"--logfile", "",
	}, s.args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case <-out.ready:
	case <-exited:
		return fmt.Errorf("redis-server on port %d exited at start: %s", s.port, out.tail())
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("redis-server on port %d not ready after %v: %s", s.port, startTimeout, out.tail())
	}
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// readyLine is what redis-server logs once it accepts connections.
var readyLine = []byte("Ready to accept connections")

// readyWriter takes redis-server's log: it closes ready at readyLine and
// keeps the log's tail for error messages.
type readyWriter struct {
	mu    sync.Mutex // guards buf and seen
	buf   []byte
	seen  bool
	ready chan struct{}
}

const tailBytes = 4096

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if !w.seen && bytes.Contains(w.buf, readyLine) {
		w.seen = true
		close(w.ready)
	}
	if len(w.buf) > 2*tailBytes {
		w.buf = append(w.buf[:0], w.buf[len(w.buf)-tailBytes:]...)
	}
	return len(p), nil
}

func (w *readyWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) == 0 {
		return "(no output)"
	}
	return string(bytes.TrimSpace(w.buf))
}
