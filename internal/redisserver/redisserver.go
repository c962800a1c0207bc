// Package redisserver starts a real redis-server (DESIGN.md §8): on a free
// loopback port, in a directory of the caller's, with persistence off
// (--save "" --appendonly no). Stop, Kill and Restart (on the same port)
// let outage tests and demos take Redis away and bring it back.
//
// Launch is for programs (examples/fleet). Start is for tests: without the
// redis-server binary on PATH it skips the test with a message naming
// `apt-get install -y redis-server`; with GEMINIGUARD_REQUIRE_REDIS=1 in the
// environment (as .ci/run sets it) it fails the test instead.
package redisserver

import (
	"bytes"
	"context"
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

// Process is a redis-server this process started. Its methods are safe for
// concurrent use. Stop it when done: it outlives its starter otherwise.
type Process struct {
	bin  string
	dir  string
	port int
	args []string // extra redis-server arguments

	mu     sync.Mutex // guards cmd and exited
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited; nil when none runs
}

// Launch starts a redis-server on a free loopback port, keeping its files in
// dir; args are more redis-server arguments (for instance
// "--cluster-enabled", "yes"). It returns once the server accepts
// connections, or an error: one matching exec.ErrNotFound when the binary
// is not on PATH, ctx's when it ends first.
func Launch(ctx context.Context, dir string, args ...string) (*Process, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	p := &Process{bin: bin, dir: dir, args: args}
	// A free port may be taken between finding it and redis-server binding
	// it; try a few.
	for range 3 {
		if p.port, err = freePort(); err == nil {
			if err = p.start(ctx); err == nil {
				return p, nil
			}
		}
	}
	return nil, err
}

// Addr returns the server's host:port.
func (p *Process) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
}

// Stop shuts the server down (SIGTERM, then SIGKILL if it lingers) and
// waits for it to exit. Stopping a stopped server does nothing.
func (p *Process) Stop() {
	p.end(syscall.SIGTERM)
}

// Kill kills the server at once (SIGKILL), as a crash would, and waits for
// it to exit.
func (p *Process) Kill() {
	p.end(syscall.SIGKILL)
}

// Restart starts the server again on the same port after Stop or Kill; it
// stops a running one first. The data is gone: persistence is off.
func (p *Process) Restart(ctx context.Context) error {
	p.Stop()
	return p.start(ctx)
}

// Pause stops the server's process (SIGSTOP), as a busy or frozen host
// would: connections are accepted by the kernel but nothing answers until
// Resume. Stop and Kill resume it first.
func (p *Process) Pause() { p.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again (SIGCONT).
func (p *Process) Resume() { p.signal(syscall.SIGCONT) }

// signal sends sig to the running server, if any.
func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *Process) end(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd, p.exited = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot end on SIGTERM
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// start runs redis-server on p.port and waits until it accepts connections.
func (p *Process) start(ctx context.Context) error {
	out := &readyWriter{ready: make(chan struct{})}
	cmd := exec.Command(p.bin, append([]string{
		"--port", strconv.Itoa(p.port),
		"--bind", "127.0.0.1",
		"--dir", p.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--loglevel", "notice",
		"--logfile", "",
	}, p.args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	fail := func(err error) error {
		_ = cmd.Process.Kill()
		<-exited
		return err
	}
	select {
	case <-out.ready:
	case <-exited:
		return fmt.Errorf("redis-server on port %d exited at start: %s", p.port, out.tail())
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-time.After(startTimeout):
		return fail(fmt.Errorf("redis-server on port %d not ready after %v: %s", p.port, startTimeout, out.tail()))
	}
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return nil
}

// Server is a redis-server owned by one test: a Process stopped by the
// test's cleanup, whose Restart fails the test when the server does not
// come back.
type Server struct {
	*Process
	t testing.TB
}

// Start starts a redis-server for t on a free loopback port, in t's
// temporary directory, and stops it in t's cleanup; args are as Launch's.
// It skips t when the binary is missing (fails it when
// GEMINIGUARD_REQUIRE_REDIS=1) and fails t when the server does not start.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-server not found (%v) and %s=1: apt-get install -y redis-server", err, RequireEnv)
		}
		t.Skipf("redis-server not found: apt-get install -y redis-server to run this test (%s=1 makes this a failure)", RequireEnv)
	}
	p, err := Launch(context.Background(), t.TempDir(), args...)
	if err != nil {
		t.Fatalf("redisserver: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Server{Process: p, t: t}
}

// Restart starts the server again on the same port (see Process.Restart),
// failing the test when it does not start.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.Process.Restart(context.Background()); err != nil {
		s.t.Fatalf("redisserver: restart: %v", err)
	}
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
