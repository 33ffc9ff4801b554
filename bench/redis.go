package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a throwaway redis-server on a free loopback port, in its own
// temp dir, without persistence; Stop kills it and removes the dir.
type redisServer struct {
	Addr    string
	Version string
	dir     string
	cmd     *exec.Cmd
}

// startRedis starts redis-server and waits until it answers PING.
func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found: run 'bash scripts/install-redis.sh' (make bench does)")
	}
	dir, err := os.MkdirTemp("", "baton-bench-redis-")
	if err != nil {
		return nil, err
	}
	s := &redisServer{dir: dir}
	for attempt := 0; attempt < 5; attempt++ {
		if err = s.start(bin); err == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

func (s *redisServer) start(bin string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if c.Ping(ctx).Err() == nil {
			s.Version = redisVersion(c.Info(ctx, "server").Val())
			return nil
		}
	}
	s.Stop()
	return fmt.Errorf("redis-server on %s did not answer PING in 10s", s.Addr)
}

func redisVersion(info string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}

// Client returns a new client of the server.
func (s *redisServer) Client(poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: poolSize})
}

// URL is the server's redis:// URL.
func (s *redisServer) URL() string { return "redis://" + s.Addr + "/0" }

// Stop kills the server; the bench owns it, nothing else talks to it.
func (s *redisServer) Stop() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Close stops the server and removes its directory.
func (s *redisServer) Close() {
	s.Stop()
	_ = os.RemoveAll(s.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
