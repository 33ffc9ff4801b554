// Package rediserr turns Redis errors into one line a person can act on: what
// went wrong, and a hint saying what to check. The CLI prints them when it
// cannot connect; a holder logs them when Redis refuses a write.
//
//	if msg, hint := rediserr.Explain(err, tlsOn); msg != "" { ... }
//
// It recognises connection refused, timeouts, unknown hosts, a TLS mismatch
// either way, WRONGPASS, NOAUTH, a database index out of range, READONLY (a
// replica) and OOM (maxmemory), and the Sentinels refusing their own
// password (WRONGPASS, NOAUTH, or one given where none is set), told apart
// from the master's. Anything else gets msg "" and the caller
// reports the error as it is.
package rediserr

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

const urlHint = "redis_url (or BATON_REDIS_URL)"

// replies are the server's error replies that have an obvious cause.
var replies = []struct{ prefix, msg, hint string }{
	{"WRONGPASS", "wrong password or user (WRONGPASS)",
		"check the password in " + urlHint + ": redis://:PASSWORD@host:port/db, or redis://USER:PASSWORD@... for an ACL user"},
	{"NOAUTH", "password required (NOAUTH)",
		"put the password in BATON_REDIS_URL: redis://:PASSWORD@host:port/db"},
	{"ERR DB index is out of range", "no such database (ERR DB index is out of range)",
		"the /DB at the end of " + urlHint + " must be below the server's 'databases' setting (16 by default)"},
	{"READONLY", "read-only replica (READONLY)",
		"point " + urlHint + " at the primary ('redis-cli -h HOST ROLE' on the replica names it)"},
	{"OOM", "out of memory (OOM: used memory > maxmemory)",
		"raise maxmemory or free memory on the server; jobs stay where they are until writes succeed again"},
}

// noSentinel starts go-redis' error when no Sentinel named the master; the
// Sentinels' own errors follow it, one a line.
const noSentinel = "redis: all sentinels specified in configuration are unreachable"

// sentinelReplies are the Sentinels' refusals of their own password
// (redis_sentinel_password), told apart from the master's (redis_url).
var sentinelReplies = []struct{ prefix, msg, hint string }{
	{"WRONGPASS", "the sentinels refused the password (WRONGPASS)",
		"check redis_sentinel_password (or BATON_REDIS_SENTINEL_PASSWORD): the Sentinels' own requirepass (sentinel.conf), not the master's, and redis_sentinel_username for an ACL user"},
	{"NOAUTH", "the sentinels require a password (NOAUTH)",
		"set BATON_REDIS_SENTINEL_PASSWORD (or redis_sentinel_password) to the Sentinels' requirepass (sentinel.conf)"},
	{"ERR AUTH", "the sentinels have no password (ERR AUTH called without any password configured)",
		"leave redis_sentinel_password (and BATON_REDIS_SENTINEL_PASSWORD) unset, or set requirepass in every sentinel.conf"},
}

// sentinelAuth explains err when no Sentinel named the master because they
// refused the password; "" otherwise.
func sentinelAuth(err error) (msg, hint string) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		rest, ok := strings.CutPrefix(e.Error(), noSentinel+": ")
		if !ok {
			continue
		}
		for _, line := range strings.Split(rest, "\n") {
			for _, r := range sentinelReplies {
				if strings.HasPrefix(line, r.prefix) {
					return r.msg, r.hint
				}
			}
		}
		return "", ""
	}
	return "", ""
}

// Explain describes err from a Redis client. tlsOn says whether the client
// used TLS (a rediss:// URL), which tells a TLS mismatch from a plain timeout
// or hang-up. msg is short and lowercase, without the address (the caller
// adds it: "redis at URL: MSG"); hint says what to check. Both are "" when err is not recognised.
func Explain(err error, tlsOn bool) (msg, hint string) {
	if err == nil {
		return "", ""
	}
	if msg, hint := sentinelAuth(err); msg != "" {
		return msg, hint
	}
	// A reply may be wrapped ("enqueue: 3 jobs added before: OOM ..."):
	// look at each error in the chain.
	for e := err; e != nil; e = errors.Unwrap(e) {
		for _, r := range replies {
			if strings.HasPrefix(e.Error(), r.prefix) {
				return r.msg, r.hint
			}
		}
	}
	var (
		dns  *net.DNSError
		cert *tls.CertificateVerificationError
		rec  tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &cert):
		return "TLS certificate not trusted (" + cert.Err.Error() + ")",
			"install the CA that signed the server's certificate in the system trust store"
	case errors.As(err, &rec) || tlsOn && timeout(err):
		return "no TLS on this port",
			"use redis:// instead of rediss://, or connect to the server's tls-port"
	case !tlsOn && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return "connection closed at once",
			"if the server speaks TLS (tls-port), use rediss:// in " + urlHint
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused",
			"start redis-server, or set " + urlHint + " to the host and port it listens on"
	case errors.As(err, &dns):
		return "unknown host " + dns.Name,
			"check the host name in " + urlHint
	case timeout(err):
		return "no answer in time",
			"check the host and port in " + urlHint + ", and any firewall in between"
	}
	return "", ""
}

func timeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
