// SPDX-License-Identifier: Apache-2.0

// Package tlsbridge lets rocketmq-client-go reach RocketMQ over TLS that verifies the
// server. The pinned client dials TLS with certificate verification off and has no hook to
// change it, so the relay gives it plain loopback addresses instead: each loopback listener of
// a Bridge forwards to one upstream address (a name server, a broker or a 5.x proxy) over TLS
// verified against the configured CAs and server name. The name servers' answers that name
// brokers (a topic's route, the cluster's broker table) are rewritten so that the client dials
// the bridge's listener of each broker, never the broker itself.
//
// The listeners accept only connections made by this process: on Linux the peer socket's
// inode (/proc/net/tcp, tcp6) must be one of this process's open files (/proc/self/fd). On
// other systems Start refuses. Connections, upstreams and the frames read are bounded.
package tlsbridge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Config configures a Bridge.
type Config struct {
	// TLS is the client configuration of the upstream connections: RootCAs (nil: the
	// system's), ServerName (empty: the host of each upstream address) and the client
	// certificate, if any. It must verify: InsecureSkipVerify is refused. Required.
	TLS *tls.Config
	// MaxConns bounds the loopback connections open at once, over every listener; more
	// are closed at accept. Defaults to 1024.
	MaxConns int
	// MaxUpstreams bounds the brokers a bridge forwards to (one listener each); a route
	// naming more is not passed on. Defaults to 256.
	MaxUpstreams int
	// MaxFrame bounds a name server's frame that is rewritten (a route or a broker table)
	// and every frame's header; other frames are streamed, not held. Defaults to 4 MiB.
	MaxFrame int
	// DialTimeout bounds the dial and TLS handshake of an upstream connection. Defaults
	// to 5 seconds.
	DialTimeout time.Duration
	// Log receives refused connections and failed handshakes. Defaults to none.
	Log zerolog.Logger
}

// Bridge is a set of loopback listeners, one per upstream address, that forward to their
// upstream over verified TLS. Safe for concurrent use.
type Bridge struct {
	cfg   Config
	conns chan struct{} // a slot per open loopback connection (MaxConns)

	mu        sync.Mutex
	brokers   map[string]*listener // by upstream address
	upstreams map[string]string    // local address -> upstream address
	ns        []*listener
	closed    bool

	refused atomic.Int64
	wg      sync.WaitGroup
}

// ErrUnsupported is returned by Start where a listener cannot tell this process's
// connections from others' (every system but Linux).
var ErrUnsupported = errors.New("tlsbridge: verifying TLS to RocketMQ needs Linux (the bridge's loopback listeners accept only this process's connections, read from /proc)")

// Start listens on loopback for each name server of nameServers (host:port) and returns
// the bridge; NameServers gives the addresses to hand to the client.
func Start(cfg Config, nameServers []string) (*Bridge, error) {
	if cfg.TLS == nil {
		return nil, errors.New("tlsbridge: Config.TLS is nil")
	}
	if cfg.TLS.InsecureSkipVerify {
		return nil, errors.New("tlsbridge: Config.TLS skips verification: use the client's own TLS for that")
	}
	if err := checkSupported(); err != nil {
		return nil, err
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1024
	}
	if cfg.MaxUpstreams <= 0 {
		cfg.MaxUpstreams = 256
	}
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = 4 << 20
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	b := &Bridge{cfg: cfg, conns: make(chan struct{}, cfg.MaxConns),
		brokers: map[string]*listener{}, upstreams: map[string]string{}}
	for _, ns := range nameServers {
		l, err := b.listen(ns, true)
		if err != nil {
			b.Close()
			return nil, err
		}
		b.ns = append(b.ns, l)
	}
	return b, nil
}

// NameServers returns the loopback addresses of the name servers, in the order given to Start.
func (b *Bridge) NameServers() []string {
	out := make([]string, len(b.ns))
	for i, l := range b.ns {
		out[i] = l.addr
	}
	return out
}

// Upstream returns the upstream address a loopback address of the bridge forwards to, and
// whether it is one.
func (b *Bridge) Upstream(local string) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	up, ok := b.upstreams[local]
	return up, ok
}

// Refused returns the number of connections refused because they did not come from this
// process.
func (b *Bridge) Refused() int64 { return b.refused.Load() }

// Verify dials every name server over TLS and returns the first certificate refusal (a
// *tls.CertificateVerificationError); name servers that cannot be reached are not an error
// here (they may come up later), and are reported by the client.
func (b *Bridge) Verify(ctx context.Context) error {
	for _, l := range b.ns {
		c, err := b.dialUpstream(ctx, l.upstream)
		if err == nil {
			_ = c.Close()
			continue
		}
		var ve *tls.CertificateVerificationError
		if errors.As(err, &ve) {
			return err
		}
	}
	return nil
}

// Close stops every listener, closes every connection and waits for them to end.
func (b *Bridge) Close() {
	b.mu.Lock()
	b.closed = true
	ls := append([]*listener(nil), b.ns...)
	for _, l := range b.brokers {
		ls = append(ls, l)
	}
	b.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	b.wg.Wait()
}

// brokerAddr returns the loopback address forwarding to the broker at upstream, starting
// its listener on first use.
func (b *Bridge) brokerAddr(upstream string) (string, error) {
	b.mu.Lock()
	l := b.brokers[upstream]
	full := len(b.brokers) >= b.cfg.MaxUpstreams
	closed := b.closed
	b.mu.Unlock()
	switch {
	case l != nil:
		return l.addr, nil
	case closed:
		return "", errors.New("tlsbridge: closed")
	case full:
		return "", fmt.Errorf("tlsbridge: more than %d brokers named by the name servers", b.cfg.MaxUpstreams)
	}
	l, err := b.listen(upstream, false)
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if other := b.brokers[upstream]; other != nil || b.closed {
		go l.close() // another caller started one first
		if other == nil {
			return "", errors.New("tlsbridge: closed")
		}
		return other.addr, nil
	}
	b.brokers[upstream] = l
	return l.addr, nil
}

// dialUpstream connects to addr over verified TLS, within DialTimeout.
func (b *Bridge) dialUpstream(ctx context.Context, addr string) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.DialTimeout)
	defer cancel()
	cfg := b.cfg.TLS.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("tlsbridge: upstream %q: %w", addr, err)
		}
		cfg.ServerName = host
	}
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tlsbridge: %s: %w", addr, err)
	}
	return c.(*tls.Conn), nil
}

// listener is one loopback listener and the upstream it forwards to; ns says whether the
// upstream is a name server, whose answers naming brokers are rewritten.
type listener struct {
	b        *Bridge
	ln       net.Listener
	addr     string
	upstream string
	ns       bool

	mu    sync.Mutex
	open  map[net.Conn]struct{}
	shut  bool
	close func()
}

func (b *Bridge) listen(upstream string, ns bool) (*listener, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tlsbridge: listen for %s: %w", upstream, err)
	}
	l := &listener{b: b, ln: ln, addr: ln.Addr().String(), upstream: upstream, ns: ns, open: map[net.Conn]struct{}{}}
	l.close = sync.OnceFunc(func() {
		_ = ln.Close()
		l.mu.Lock()
		l.shut = true
		for c := range l.open {
			_ = c.Close()
		}
		l.mu.Unlock()
	})
	b.mu.Lock()
	b.upstreams[l.addr] = upstream
	b.mu.Unlock()
	b.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *listener) accept() {
	defer l.b.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		select {
		case l.b.conns <- struct{}{}:
		default:
			l.b.cfg.Log.Warn().Str("upstream", l.upstream).Int("max", l.b.cfg.MaxConns).
				Msg("tlsbridge: too many connections open; this one is closed")
			_ = c.Close()
			continue
		}
		l.b.wg.Add(1)
		go func() {
			defer l.b.wg.Done()
			defer func() { <-l.b.conns }()
			l.serve(c)
		}()
	}
}

// track records c as open (false when the listener has closed), and untrack forgets it.
func (l *listener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut {
		return false
	}
	l.open[c] = struct{}{}
	return true
}

func (l *listener) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.open, c)
	l.mu.Unlock()
}

// serve checks that c comes from this process, connects to the upstream and forwards
// until either side ends.
func (l *listener) serve(c net.Conn) {
	defer c.Close()
	if err := fromThisProcess(c); err != nil {
		l.b.refused.Add(1)
		l.b.cfg.Log.Warn().Err(err).Str("peer", c.RemoteAddr().String()).Str("upstream", l.upstream).
			Msg("tlsbridge: refused a connection that is not this process's")
		return
	}
	up, err := l.b.dialUpstream(context.Background(), l.upstream)
	if err != nil {
		l.b.cfg.Log.Error().Err(err).Str("upstream", l.upstream).Msg("tlsbridge: TLS to RocketMQ failed")
		return
	}
	defer up.Close()
	if !l.track(c) || !l.track(up) {
		return
	}
	defer l.untrack(c)
	defer l.untrack(up)
	done := make(chan struct{}, 2)
	toUp, toClient := l.pipes(c, up)
	go func() { toUp(); done <- struct{}{} }()
	go func() { toClient(); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = up.Close()
	<-done
}

// pipes returns the two directions of a connection: bytes as they come for a broker, frames
// read and the brokers' addresses rewritten for a name server.
func (l *listener) pipes(c net.Conn, up net.Conn) (toUp, toClient func()) {
	if !l.ns {
		return func() { _, _ = io.Copy(up, c) }, func() { _, _ = io.Copy(c, up) }
	}
	fw := newFramer(l.b.cfg.MaxFrame, l.b.brokerAddr)
	log := l.b.cfg.Log.With().Str("upstream", l.upstream).Logger()
	return func() {
			if err := fw.requests(c, up); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				log.Warn().Err(err).Msg("tlsbridge: request to the name server not passed on")
			}
		}, func() {
			if err := fw.responses(up, c); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				log.Warn().Err(err).Msg("tlsbridge: answer of the name server not passed on")
			}
		}
}
