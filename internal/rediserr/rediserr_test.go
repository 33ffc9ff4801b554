package rediserr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
)

// TestExplain: wrapped causes are found; an error it does not know gets "".
func TestExplain(t *testing.T) {
	for _, tc := range []struct {
		err     error
		tls     bool
		wantMsg string
	}{
		{fmt.Errorf("enqueue: %w", errors.New("OOM command not allowed when used memory > 'maxmemory'.")), false, "out of memory (OOM: used memory > maxmemory)"},
		{fmt.Errorf("read: %w", io.EOF), false, "connection closed at once"},
		{fmt.Errorf("dial: %w", context.DeadlineExceeded), true, "no TLS on this port"},
		{fmt.Errorf("dial: %w", context.DeadlineExceeded), false, "no answer in time"},
		{errors.New("ERR unknown command 'FOO'"), false, ""},
		{fmt.Errorf("redis: all sentinels specified in configuration are unreachable: %w", errors.Join(
			errors.New("WRONGPASS invalid username-password pair or user is disabled."), errors.New("WRONGPASS invalid username-password pair or user is disabled."))),
			false, "the sentinels refused the password (WRONGPASS)"},
		{fmt.Errorf("ping: %w", fmt.Errorf("redis: all sentinels specified in configuration are unreachable: %w", errors.Join(
			fmt.Errorf("dial: %w", context.DeadlineExceeded), errors.New("NOAUTH Authentication required.")))),
			false, "the sentinels require a password (NOAUTH)"},
		{errors.New("WRONGPASS invalid username-password pair or user is disabled."), false, "wrong password or user (WRONGPASS)"},
		{nil, false, ""},
	} {
		msg, hint := Explain(tc.err, tc.tls)
		if msg != tc.wantMsg || (msg == "") != (hint == "") {
			t.Errorf("Explain(%v, %v) = %q, %q; want %q and a hint", tc.err, tc.tls, msg, hint, tc.wantMsg)
		}
	}
}
