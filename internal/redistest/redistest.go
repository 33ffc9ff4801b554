//go:build linux

// Package redistest starts a real redis-server for tests: on a free loopback
// port, in a temp dir, stopped at cleanup. When redis-server is missing the
// test fails and says how to install it; nothing is skipped.
package redistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
	"github.com/redis/go-redis/v9"
)

// InstallHint tells how to get redis-server on Debian.
const InstallHint = "redis-server not found in PATH: install it with 'apt-get install -y redis-server' (or run .ci/run)"

// Server is a running redis-server.
type Server struct {
	Addr string // host:port
	Dir  string // working dir (appendonly files live here)
	args []string
	tls  *tls.Config // non-nil: the server speaks TLS only (StartTLS)
	cmd  *exec.Cmd
	// exited is closed once cmd has been waited for: a server that exits at
	// once (a port it may not use) is seen without waiting for its PING.
	exited chan struct{}
	tb     testing.TB
}

// URL is the server's redis:// URL.
func (s *Server) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr + "/0"
	}
	return "redis://" + s.Addr + "/0"
}

// Client returns a client closed at cleanup, with the server's
// requirepass when it was started with one.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.tls, Password: s.password()})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// password is the value of the last --requirepass argument, if any.
func (s *Server) password() string {
	pw := ""
	for i, a := range s.args {
		if a == "--requirepass" && i+1 < len(s.args) {
			pw = s.args[i+1]
		}
	}
	return pw
}

// Option adds redis-server arguments, e.g. Appendonly.
type Option []string

// Appendonly turns on AOF persistence with fsync on every write.
var Appendonly = Option{"--appendonly", "yes", "--appendfsync", "always"}

// Start starts redis-server and waits until it answers PING.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	return start(tb, &Server{Dir: tb.TempDir(), tb: tb}, opts)
}

// StartTLS starts a redis-server that speaks TLS only, with a self-signed
// certificate for 127.0.0.1 (clients do not need one).
func StartTLS(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s := &Server{Dir: tb.TempDir(), tb: tb}
	cert, key, pool := selfSigned(tb)
	certFile, keyFile := filepath.Join(s.Dir, "cert.pem"), filepath.Join(s.Dir, "key.pem")
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		tb.Fatal(err)
	}
	s.tls = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	opts = append([]Option{{"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", certFile, "--tls-auth-clients", "no"}}, opts...)
	return start(tb, s, opts)
}

func start(tb testing.TB, s *Server, opts []Option) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatal(InstallHint)
	}
	for _, o := range opts {
		s.args = append(s.args, o...)
	}
	port := freePort
	if slices.Contains(s.args, "--cluster-enabled") {
		port = clusterPort
	}
	for attempt := 0; ; attempt++ {
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port(tb)))
		if err = s.start(bin); err == nil {
			break
		}
		if attempt == 4 {
			tb.Fatalf("start redis-server: %v", err)
		}
	}
	tb.Cleanup(s.Stop)
	return s
}

func (s *Server) start(bin string) error {
	_, port, _ := net.SplitHostPort(s.Addr)
	ports := []string{"--port", port}
	if s.tls != nil {
		ports = []string{"--port", "0", "--tls-port", port}
	}
	args := append(append(ports, "--bind", "127.0.0.1", "--dir", s.Dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(s.Dir, "redis.log")), s.args...)
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Registered as a child os/exec waits for: a test that makes itself a
	// child subreaper must not take it for an orphan.
	if err := proc.Start(cmd); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		proc.Done(cmd.Process.Pid)
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, TLSConfig: s.tls})
	defer c.Close()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		// A server with requirepass answers too, with NOAUTH.
		if err := c.Ping(context.Background()).Err(); err == nil || strings.HasPrefix(err.Error(), "NOAUTH") {
			if err == nil && !s.ours(c) {
				break // another test's server took the port first
			}
			return nil
		}
		select {
		case <-exited:
			end = time.Now()
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = cmd.Process.Kill()
	<-exited
	s.cmd = nil
	log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return fmt.Errorf("redis-server on %s did not answer: %s", s.Addr, log)
}

// ours reports whether the server c reaches works in s.Dir.
func (s *Server) ours(c *redis.Client) bool {
	v, err := c.ConfigGet(context.Background(), "dir").Result()
	if err != nil {
		return true // CONFIG refused: nothing to tell by
	}
	real, _ := filepath.EvalSymlinks(s.Dir)
	return v["dir"] == s.Dir || v["dir"] == real
}

// Stop kills the server (SIGKILL: the fastest, and what a crash looks like).
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart stops the server and starts it again on the same port and dir;
// with Appendonly the data survives.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	bin, _ := exec.LookPath("redis-server")
	if err := s.start(bin); err != nil {
		s.tb.Fatalf("restart redis-server: %v", err)
	}
}

func freePort(tb testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// clusterPort is a free port for a cluster node: Redis refuses ports above
// 55535 there (its bus listens on the port + 10000), and the bus port must
// be free too.
func clusterPort(tb testing.TB) int {
	for {
		p := freePort(tb)
		if p > 55535 {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000))); err == nil {
			_ = l.Close()
			return p
		}
	}
}

// StartMain starts a redis-server for a TestMain (where there is no
// testing.TB: runnable Examples need one too). It returns the address and a
// stop func that kills the server and removes its dir.
func StartMain() (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("%s", InstallHint)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return "", nil, err
	}
	s := &Server{Dir: dir}
	for attempt := 0; ; attempt++ {
		l, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			return "", nil, lerr
		}
		s.Addr = l.Addr().String()
		_ = l.Close()
		if err = s.start(bin); err == nil {
			break
		}
		if attempt == 4 {
			_ = os.RemoveAll(dir)
			return "", nil, err
		}
	}
	return s.Addr, func() { s.Stop(); _ = os.RemoveAll(dir) }, nil
}

// selfSigned makes a certificate and key (PEM) for 127.0.0.1, valid for a day,
// and a pool that trusts it.
func selfSigned(tb testing.TB) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), pool
}
