// SPDX-License-Identifier: Apache-2.0

// Package tcpproxy is a loopback TCP proxy for tests and benchmarks: it forwards every
// connection to one target, can freeze (stop forwarding in both directions while keeping
// every connection open, the way a black-holed network path behaves) and thaw, and counts
// the MySQL commands clients send through it (the idle database load of a relay).
package tcpproxy

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards connections accepted on Addr to the target.
type Proxy struct {
	ln       net.Listener
	commands atomic.Int64

	mu     sync.Mutex
	target string // where new connections go
	frozen bool
	thawed chan struct{} // closed when not frozen
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// Start listens on a free loopback port and forwards to target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, thawed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.thawed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Freeze stops forwarding: bytes already read wait, nothing is written either way, and no
// connection is closed. New connections are accepted and frozen too.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen = true
		p.thawed = make(chan struct{})
	}
}

// SetTarget sends the connections accepted from now on to target (host:port) and leaves the
// open ones where they are, the way a failover's proxy or DNS change moves new connections to
// the new primary while old ones stay on the old.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// Thaw resumes forwarding.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
}

// Commands is the number of MySQL command packets (COM_QUERY, COM_STMT_EXECUTE, COM_PING,
// ...: the packets of sequence number 0) clients have sent through the proxy. It counts
// right only for plain (not TLS, not compressed) MySQL connections.
func (p *Proxy) Commands() int64 { return p.commands.Load() }

// Close stops accepting, closes every connection and waits for the forwarding to end.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		server, err := net.Dial("tcp", target)
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, server) {
			return
		}
		p.wg.Add(2)
		go p.pipe(server, client, true)
		go p.pipe(client, server, false)
	}
}

// track records the pair for Close; false when the proxy is closed already.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.thawed
}

// pipe copies from src to dst through the gate; fromClient streams are parsed for commands.
func (p *Proxy) pipe(dst, src net.Conn, fromClient bool) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	var pc packetCounter
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if fromClient {
				p.commands.Add(pc.feed(buf[:n]))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a closed connection: close both sides
			return
		}
	}
}

// packetCounter follows MySQL packet framing (3-byte little-endian length, 1-byte sequence
// number) across reads and counts the packets whose sequence number is 0: commands.
type packetCounter struct {
	header [4]byte
	got    int // header bytes read so far
	left   int // payload bytes of the current packet still to skip
}

func (c *packetCounter) feed(b []byte) int64 {
	var n int64
	for len(b) > 0 {
		if c.left > 0 {
			k := min(c.left, len(b))
			c.left -= k
			b = b[k:]
			continue
		}
		k := copy(c.header[c.got:], b)
		c.got += k
		b = b[k:]
		if c.got < 4 {
			continue
		}
		c.got = 0
		c.left = int(c.header[0]) | int(c.header[1])<<8 | int(c.header[2])<<16
		if c.header[3] == 0 {
			n++
		}
	}
	return n
}
