// Package serve is what baton's HTTP servers (baton web, baton metrics
// --listen) share, so that both are safe alike: a server whose every
// connection is bounded in time, and a guard that serves loopback hosts
// only.
//
//	srv := serve.Server(serve.LoopbackOnly(h, "baton web serves loopback hosts only", nil))
//	srv.Serve(ln)
//
// A server on a loopback address is still reachable from any web page a
// local browser opens, through a DNS name that resolves to 127.0.0.1 (DNS
// rebinding): such a request carries that name as its Host header, which
// LoopbackOnly refuses. Timeouts keep a client that connects and stalls
// (or opens hundreds of idle connections) from holding them for good.
package serve

import (
	"net"
	"net/http"
	"strings"
	"time"
)

// The time bounds of Server's connections.
const (
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout = 30 * time.Second
	// WriteTimeout bounds writing a response, from the end of its request's headers.
	WriteTimeout = 30 * time.Second
	// IdleTimeout bounds waiting for the next request on a kept-alive connection.
	IdleTimeout = 30 * time.Second
)

// Server returns an http.Server for h with every connection bounded in
// time (the timeouts above).
func Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout}
}

// LoopbackOnly serves with next the requests whose Host header is loopback
// (LoopbackHost) and refuses the others with 421 Misdirected Request and
// the text refusal; refused, unless nil, hears each refused request.
func LoopbackOnly(next http.Handler, refusal string, refused func(*http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !LoopbackHost(r.Host) {
			if refused != nil {
				refused(r)
			}
			http.Error(w, refusal, http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// LoopbackHost reports whether hostport (a Host header or a listen address)
// names this machine's loopback: localhost, 127.0.0.0/8 or ::1.
func LoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
