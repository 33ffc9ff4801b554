package faultproxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestPartitionDeliversLate: bytes a client sends during a partition, and
// then closes, reach the server only after the partition heals, in order.
func TestPartitionDeliversLate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	p, err := Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	p.Partition(true)
	for _, s := range []string{"late ", "write"} {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = c.Close()
	select {
	case b := <-got:
		t.Fatalf("the server read %q during the partition", b)
	case <-time.After(300 * time.Millisecond):
	}
	p.Partition(false)
	select {
	case b := <-got:
		if string(b) != "late write" {
			t.Fatalf("after the partition the server read %q, want %q", b, "late write")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing delivered after the partition healed")
	}
}

// TestStallSparesNewConnections: after Stall, a connection open before
// delivers nothing either way while one made after works.
func TestStallSparesNewConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	p, err := Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	echo := func(c net.Conn, within time.Duration) error {
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(within))
		b := make([]byte, 4)
		_, err := io.ReadFull(c, b)
		return err
	}
	old, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := echo(old, 5*time.Second); err != nil {
		t.Fatal("before the stall:", err)
	}
	p.Stall()
	if err := echo(old, 300*time.Millisecond); err == nil {
		t.Fatal("a stalled connection still echoes")
	}
	fresh, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := echo(fresh, 5*time.Second); err != nil {
		t.Fatal("a connection made after the stall:", err)
	}
}
