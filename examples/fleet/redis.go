package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long redis-server may take to answer a PING, and
// how long stop waits for it to exit before killing it.
const startTimeout = 5 * time.Second

// redisServer is a redis-server this program started: on a free loopback
// port, in a temporary directory, without persistence. Its methods are not
// safe for concurrent use.
type redisServer struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has exited
	log      bytes.Buffer  // its output, for error messages; written by cmd until exited
}

// startRedis starts a redis-server, or returns an error matching
// exec.ErrNotFound when the binary is not on PATH.
func startRedis(ctx context.Context) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "geminiguard-fleet-")
	if err != nil {
		return nil, err
	}
	s := &redisServer{bin: bin, dir: dir}
	// A free port may be taken between finding it and redis-server binding
	// it; try a few.
	for range 3 {
		if s.port, err = freePort(); err == nil {
			if err = s.start(ctx); err == nil {
				return s, nil
			}
		}
	}
	os.RemoveAll(dir)
	return nil, err
}

func (s *redisServer) addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// start runs redis-server on s.port and waits until it answers a PING.
func (s *redisServer) start(ctx context.Context) error {
	s.log.Reset()
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "")
	cmd.Stdout, cmd.Stderr = &s.log, &s.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(s.exited)

	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.exited:
			s.cmd = nil
			return fmt.Errorf("redis-server on port %d exited at start: %s", s.port, bytes.TrimSpace(s.log.Bytes()))
		case <-ctx.Done():
			s.end(syscall.SIGKILL)
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if rdb.Ping(ctx).Err() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.end(syscall.SIGKILL)
			return fmt.Errorf("redis-server on port %d not answering after %v", s.port, startTimeout)
		}
	}
}

// kill kills the server at once, as a crash would.
func (s *redisServer) kill() {
	s.end(syscall.SIGKILL)
}

// restart starts the server again on the same port; its data is gone.
func (s *redisServer) restart(ctx context.Context) error {
	s.end(syscall.SIGTERM)
	return s.start(ctx)
}

// stop shuts the server down for good and removes its directory.
func (s *redisServer) stop() {
	s.end(syscall.SIGTERM)
	os.RemoveAll(s.dir)
}

// end signals the server, waits for it to exit (killing it when it lingers
// past startTimeout) and forgets it. It does nothing when none runs.
func (s *redisServer) end(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(startTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
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
