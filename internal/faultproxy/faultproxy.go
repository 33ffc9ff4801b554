// Package faultproxy is a TCP proxy for tests that can be told to misbehave:
// blackhole (bytes are swallowed, connections stay open, as in a network
// partition), stall the connections open now (new ones work), partition (bytes wait and are delivered when it heals, as TCP
// retransmits them), delay every chunk, refuse new connections, or reset every open
// connection. It sits between a client and a real server (baton and
// redis-server) on loopback.
package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from Addr to a target. Its accept goroutine and
// two goroutines per connection are stopped by Close.
type Proxy struct {
	Addr   string // host:port clients dial
	target string
	ln     net.Listener

	blackhole atomic.Bool
	partition atomic.Bool
	refuse    atomic.Bool
	delay     atomic.Int64 // ns added before forwarding each chunk

	mu     sync.Mutex                // guards conns
	conns  map[net.Conn]*atomic.Bool // both ends of a pair share its stalled flag
	wg     sync.WaitGroup
	closed atomic.Bool
}

// Start listens on a free loopback port and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]*atomic.Bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Blackhole swallows every byte in both directions while on; connections
// stay open, so clients see timeouts, not errors.
func (p *Proxy) Blackhole(on bool) { p.blackhole.Store(on) }

// Partition holds every byte in both directions while on and delivers it,
// in order, once off: what a client sent during a network partition reaches
// the server after it heals, as TCP retransmission makes it, even when the
// client has closed the connection (or exited) meanwhile.
func (p *Proxy) Partition(on bool) { p.partition.Store(on) }

// Stall swallows every byte, for good, on the connections open now; those
// made afterwards work: a peer or a NAT entry that vanished without a
// reset, seen from one client's pooled connections.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, stalled := range p.conns {
		stalled.Store(true)
	}
}

// Refuse closes new connections at once while on.
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// Delay holds every chunk for d before forwarding it (0: none).
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Reset closes every open connection (clients see a reset or EOF).
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Close stops accepting, closes every connection and waits for the
// goroutines.
func (p *Proxy) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		stalled := new(atomic.Bool)
		if !p.track(stalled, c, s) {
			return
		}
		p.wg.Add(2)
		go p.pipe(s, c, stalled)
		go p.pipe(c, s, stalled)
	}
}

// track registers a connection pair; false when the proxy is closed.
func (p *Proxy) track(stalled *atomic.Bool, c ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() {
		for _, x := range c {
			_ = x.Close()
		}
		return false
	}
	for _, x := range c {
		p.conns[x] = stalled
	}
	return true
}

// pipe copies src to dst chunk by chunk, applying the faults in force.
func (p *Proxy) pipe(dst, src net.Conn, stalled *atomic.Bool) {
	defer p.wg.Done()
	defer func() {
		_ = dst.Close()
		_ = src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for n > 0 && p.partition.Load() && !p.closed.Load() {
			time.Sleep(5 * time.Millisecond) // the rest waits in the kernel's buffers
		}
		if n > 0 && !p.blackhole.Load() && !stalled.Load() {
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			if p.blackhole.Load() {
				continue
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a reset: close both sides
			return
		}
	}
}
