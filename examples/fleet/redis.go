package main

import (
	"context"
	"os"

	"github.com/geminiguard/geminiguard/internal/redisserver"
)

// startRedis starts a redis-server of this program's own in a temporary
// directory, and returns it with stop, which shuts it down and removes the
// directory; an error matching exec.ErrNotFound when the binary is not on
// PATH.
func startRedis(ctx context.Context) (srv *redisserver.Process, stop func(), err error) {
	dir, err := os.MkdirTemp("", "geminiguard-fleet-")
	if err != nil {
		return nil, nil, err
	}
	if srv, err = redisserver.Launch(ctx, dir); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() { srv.Stop(); os.RemoveAll(dir) }, nil
}
