package serve

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestLoopbackOnly(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	var refused []string
	h := LoopbackOnly(ok, "loopback only", func(r *http.Request) { refused = append(refused, r.Host) })
	for _, tc := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:9187", http.StatusOK},
		{"localhost", http.StatusOK},
		{"[::1]:80", http.StatusOK},
		{"evil.example:9187", http.StatusMisdirectedRequest},
		{"localhost.evil.example", http.StatusMisdirectedRequest},
		{"10.0.0.1:9187", http.StatusMisdirectedRequest},
	} {
		t.Run(tc.host, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/metrics", nil)
			req.Host = tc.host
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tc.want {
				t.Errorf("Host %s: %d, want %d", tc.host, w.Code, tc.want)
			}
		})
	}
	if len(refused) != 3 {
		t.Errorf("refused heard %v, want the 3 foreign hosts", refused)
	}
}

func TestServerBoundsConnections(t *testing.T) {
	s := Server(http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 {
		t.Fatalf("a connection is unbounded: %+v", s)
	}
}
