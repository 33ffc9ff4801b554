//go:build linux

package redistest

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
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
	"github.com/redis/go-redis/v9"
)

// SentinelHint tells how to get Sentinel on Debian.
const SentinelHint = "redis-sentinel not found in PATH: install it with 'apt-get install -y redis-sentinel' (or run scripts/install-test-deps.sh)"

// Group is a master, one replica and three Sentinels that watch the
// master under Name, all on loopback, each in its own temp dir.
type Group struct {
	Name            string   // the master name the Sentinels monitor
	Master, Replica *Server  // as started; after a failover the roles swap
	Sentinels       []string // host:port of each Sentinel
	// SentinelPassword is the Sentinels' requirepass (SentinelAuth), "" for none.
	SentinelPassword string
	// DataPassword is the master's and replica's requirepass (DataAuth), ""
	// for none.
	DataPassword string
	tb           testing.TB
}

// sentinelAuth marks the Option SentinelAuth returns: it is StartGroup's,
// never a redis-server argument.
const sentinelAuth = "\x00sentinel-requirepass"

// SentinelAuth is a StartGroup option: every Sentinel requires password
// (requirepass in sentinel.conf, which they also use with each other).
// The data servers keep no password.
func SentinelAuth(password string) Option { return Option{sentinelAuth, password} }

// dataAuth marks the Option DataAuth returns.
const dataAuth = "\x00data-requirepass"

// DataAuth is a StartGroup option: the master and the replica require
// password (requirepass, and masterauth for the replica's sync), and the
// Sentinels are told it (sentinel auth-pass).
func DataAuth(password string) Option { return Option{dataAuth, password} }

// sentinelClient is a client of the Sentinel at addr, with the group's
// password.
func (g *Group) sentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: addr, Password: g.SentinelPassword})
}

// StartGroup starts the master, its replica (synced before the Sentinels
// start, so they know it at once) and three Sentinels with a 1s
// down-after. opts go to both data servers, but SentinelAuth to the
// Sentinels.
func StartGroup(tb testing.TB, opts ...Option) *Group {
	tb.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		tb.Fatal(SentinelHint)
	}
	g := &Group{Name: "batonmaster", tb: tb}
	data := opts[:0:0]
	for _, o := range opts {
		switch {
		case len(o) == 2 && o[0] == sentinelAuth:
			g.SentinelPassword = o[1]
		case len(o) == 2 && o[0] == dataAuth:
			g.DataPassword = o[1]
			data = append(data, Option{"--requirepass", o[1], "--masterauth", o[1]})
		default:
			data = append(data, o)
		}
	}
	opts = data
	// A replica's full sync starts at once, not after Redis 7's 5s wait
	// for more replicas to share it.
	opts = append([]Option{{"--repl-diskless-sync-delay", "0"}}, opts...)
	g.Master = Start(tb, opts...)
	_, mport, _ := net.SplitHostPort(g.Master.Addr)
	g.Replica = Start(tb, append(opts, Option{"--replicaof", "127.0.0.1", mport})...)
	rc := g.Replica.Client()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, _ := rc.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(end) {
			tb.Fatalf("replica %s did not sync with %s: %s", g.Replica.Addr, g.Master.Addr, info)
		}
	}
	for i := 0; i < 3; i++ {
		g.Sentinels = append(g.Sentinels, g.startSentinel(bin, mport))
	}
	// Each Sentinel has found the replica and the other Sentinels.
	for _, a := range g.Sentinels {
		sc := g.sentinelClient(a)
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			m, err := sc.Master(context.Background(), g.Name).Result()
			if err == nil && m["num-slaves"] == "1" && m["num-other-sentinels"] == "2" {
				break
			}
			if time.Now().After(end) {
				tb.Fatalf("sentinel %s does not see the replica and the other sentinels: %v %v", a, m, err)
			}
		}
		_ = sc.Close()
	}
	return g
}

// startSentinel starts one Sentinel on a free port and returns its address.
func (g *Group) startSentinel(bin, mport string) string {
	dir := g.tb.TempDir()
	port := strconv.Itoa(freePort(g.tb))
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
		"sentinel monitor %s 127.0.0.1 %s 2\n"+
		"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 10000\n",
		port, dir, filepath.Join(dir, "sentinel.log"), g.Name, mport, g.Name, g.Name)
	if g.SentinelPassword != "" {
		body += "requirepass " + g.SentinelPassword + "\n"
	}
	if g.DataPassword != "" {
		body += "sentinel auth-pass " + g.Name + " " + g.DataPassword + "\n"
	}
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil { // Sentinel rewrites it
		g.tb.Fatal(err)
	}
	cmd := exec.Command(bin, conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := proc.Start(cmd); err != nil {
		g.tb.Fatal(err)
	}
	g.tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		proc.Done(cmd.Process.Pid)
	})
	addr := net.JoinHostPort("127.0.0.1", port)
	c := redis.NewClient(&redis.Options{Addr: addr, Password: g.SentinelPassword, MaxRetries: -1})
	defer c.Close()
	for end := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			g.tb.Fatalf("sentinel on %s did not answer: %s", addr, log)
		}
	}
	return addr
}

// MasterAddr is the master's address as the first Sentinel that answers
// reports it.
func (g *Group) MasterAddr() (string, error) {
	var last error
	for _, a := range g.Sentinels {
		sc := g.sentinelClient(a)
		hp, err := sc.GetMasterAddrByName(context.Background(), g.Name).Result()
		_ = sc.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel names the master: %v", last)
}

// Failover forces a failover (SENTINEL FAILOVER: no agreement needed) and
// waits until the Sentinels name another master and it answers as one. It returns the new master's address.
func (g *Group) Failover() string {
	g.tb.Helper()
	old, err := g.MasterAddr()
	if err != nil {
		g.tb.Fatal(err)
	}
	sc := g.sentinelClient(g.Sentinels[0])
	defer sc.Close()
	if err := sc.Failover(context.Background(), g.Name).Err(); err != nil {
		g.tb.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		addr, err := g.MasterAddr()
		if err == nil && addr != old {
			c := redis.NewClient(&redis.Options{Addr: addr})
			role, _ := c.Do(context.Background(), "ROLE").Slice()
			_ = c.Close()
			if len(role) > 0 && role[0] == "master" {
				return addr
			}
		}
		if time.Now().After(end) {
			g.tb.Fatalf("no failover from %s within 30s (%s, %v)", old, addr, err)
		}
	}
}

// Demote makes the server at old a replica of the master at addr now, as
// the Sentinels do on their own only some 8-18s after a forced failover
// of a master that is still up (until then it takes writes that are lost).
func (g *Group) Demote(old, addr string) {
	g.tb.Helper()
	h, p, _ := net.SplitHostPort(addr)
	c := redis.NewClient(&redis.Options{Addr: old})
	defer c.Close()
	if err := c.ReplicaOf(context.Background(), h, p).Err(); err != nil {
		g.tb.Fatalf("REPLICAOF %s on %s: %v", addr, old, err)
	}
}

// StartCluster starts a Redis Cluster of n masters (no replicas) on
// loopback, the hash slots split evenly, and waits until every node says
// the cluster is ok. It returns the nodes.
func StartCluster(tb testing.TB, n int) []*Server {
	tb.Helper()
	var nodes []*Server
	for i := 0; i < n; i++ {
		nodes = append(nodes, Start(tb, Option{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}))
	}
	ctx := context.Background()
	for i, s := range nodes {
		c := s.Client()
		from, to := i*16384/n, (i+1)*16384/n-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", from, to).Err(); err != nil {
			tb.Fatalf("CLUSTER ADDSLOTSRANGE %d %d on %s: %v", from, to, s.Addr, err)
		}
		if i > 0 {
			h, p, _ := net.SplitHostPort(s.Addr)
			if err := nodes[0].Client().ClusterMeet(ctx, h, p).Err(); err != nil {
				tb.Fatalf("CLUSTER MEET %s: %v", s.Addr, err)
			}
		}
	}
	for _, s := range nodes {
		c := s.Client()
		for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			info, _ := c.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				break
			}
			if time.Now().After(end) {
				tb.Fatalf("cluster node %s not ok: %s", s.Addr, info)
			}
		}
	}
	return nodes
}
