// SPDX-License-Identifier: Apache-2.0

package httpserve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound what clients can hold of the server. Zero fields take their defaults.
type Limits struct {
	// MaxConnections bounds the open connections. When a new one arrives at the limit, an
	// idle keep-alive connection is closed to make room, else the oldest one still sending
	// its request headers; when every connection is running a handler, the new one is
	// closed. Defaults to 1024.
	MaxConnections int
	// ReadHeaderTimeout bounds the sending of a request's headers. Defaults to 5 seconds.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, body included. Defaults to 15 seconds.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end of the answer, so
	// a client that does not read its answer holds its connection no longer. It must exceed
	// the slowest handler (the dashboard's overview may take 10 seconds). Defaults to 30
	// seconds.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no new request. Defaults to 60
	// seconds, more than Prometheus's usual scrape interval.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers. Defaults to 16 KiB.
	MaxHeaderBytes int
	// MaxBodyBytes bounds a request's body. Defaults to 1 MiB.
	MaxBodyBytes int64
	// WriteStall bounds each write of an answer: a client that takes no bytes for this long
	// is cut, so a slow reader holds its connection for WriteStall, not WriteTimeout.
	// Defaults to 5 seconds.
	WriteStall time.Duration
	// Reserved connections are accepted beyond MaxConnections when every connection runs a
	// handler, for the paths of ReservedPaths only; any other request on one is answered 503
	// and the connection closed. A probe therefore always finds a connection, whatever the
	// clients holding the others do. Defaults to 32.
	Reserved int
	// ReservedPaths are the paths served on reserved connections (the probes). Defaults to
	// none: reserved connections serve nothing.
	ReservedPaths []string
}

func (l *Limits) setDefaults() {
	if l.MaxConnections == 0 {
		l.MaxConnections = 1024
	}
	if l.ReadHeaderTimeout == 0 {
		l.ReadHeaderTimeout = 5 * time.Second
	}
	if l.ReadTimeout == 0 {
		l.ReadTimeout = 15 * time.Second
	}
	if l.WriteTimeout == 0 {
		l.WriteTimeout = 30 * time.Second
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = time.Minute
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 16 << 10
	}
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = 1 << 20
	}
	if l.WriteStall == 0 {
		l.WriteStall = 5 * time.Second
	}
	if l.Reserved == 0 {
		l.Reserved = 32
	}
}

// Server is an *http.Server with its listener, bounded by Limits.
type Server struct {
	*http.Server
	ln *limitListener
}

// Listen listens on addr and returns the server of h, bounded by lim; Serve starts it.
func Listen(addr string, h http.Handler, lim Limits) (*Server, error) {
	lim.setDefaults()
	if lim.MaxConnections < 1 {
		return nil, fmt.Errorf("httpserve: MaxConnections must be positive, got %d", lim.MaxConnections)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ll := &limitListener{Listener: ln, max: lim.MaxConnections, reserved: lim.Reserved, stall: lim.WriteStall,
		conns: map[*conn]http.ConnState{}}
	srv := &http.Server{
		Handler:           busy(http.MaxBytesHandler(h, lim.MaxBodyBytes), lim.ReservedPaths),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnState:         ll.track,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	return &Server{Server: srv, ln: ll}, nil
}

// Addr returns the address listened on (with the port chosen for ":0").
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown or Close; it returns http.ErrServerClosed then.
func (s *Server) Serve() error { return s.Server.Serve(s.ln) }

// Open returns the number of connections open now.
func (s *Server) Open() int {
	s.ln.mu.Lock()
	defer s.ln.mu.Unlock()
	return len(s.ln.conns)
}

// limitListener accepts connections up to max open, making room as Limits.MaxConnections says.
type limitListener struct {
	net.Listener
	max      int
	reserved int           // connections beyond max, for the reserved paths only
	stall    time.Duration // Limits.WriteStall

	mu    sync.Mutex
	conns map[*conn]http.ConnState
}

// conn is an accepted connection, forgotten by its listener once closed.
type conn struct {
	net.Conn
	ln       *limitListener
	accepted time.Time
	reserve  bool         // accepted beyond max: serves the reserved paths only
	handling atomic.Int32 // handlers running on it: it is past its request headers
	once     sync.Once
	// deadline is the write deadline the server set (WriteTimeout); each write is given
	// at most the listener's stall beyond its start, and never more than deadline.
	mu       sync.Mutex
	deadline time.Time
}

type connKey struct{}

// busy marks the connection as running a handler while h runs: it then can no longer be
// taken for one stalled in its headers. On a reserved connection it serves only the paths
// of reserved.
func busy(h http.Handler, reserved []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*conn); ok {
			if c.reserve && !slices.Contains(reserved, r.URL.Path) {
				w.Header().Set("Connection", "close")
				http.Error(w, "server busy: every connection is in use", http.StatusServiceUnavailable)
				return
			}
			c.handling.Add(1)
			defer c.handling.Add(-1)
		}
		h.ServeHTTP(w, r)
	})
}

// SetWriteDeadline records the server's deadline for the answer; Write applies it.
func (c *conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline is SetReadDeadline and SetWriteDeadline.
func (c *conn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// Write writes b with a deadline of the listener's stall from now (or the server's deadline
// when sooner): a client that stops reading is cut after the stall.
func (c *conn) Write(b []byte) (int, error) {
	d := time.Now().Add(c.ln.stall)
	c.mu.Lock()
	if !c.deadline.IsZero() && c.deadline.Before(d) {
		d = c.deadline
	}
	c.mu.Unlock()
	if err := c.Conn.SetWriteDeadline(d); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.ln.mu.Lock()
		delete(c.ln.conns, c)
		c.ln.mu.Unlock()
	})
	return c.Conn.Close()
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &conn{Conn: nc, ln: l, accepted: time.Now()}
		l.mu.Lock()
		var victim *conn
		if len(l.conns) >= l.max {
			victim = l.victim()
		}
		if victim == nil && len(l.conns) >= l.max {
			if len(l.conns) >= l.max+l.reserved {
				l.mu.Unlock()
				_ = nc.Close() // every connection is busy with a request: refuse this one
				continue
			}
			c.reserve = true // for a probe: every other connection runs a handler
		}
		l.conns[c] = http.StateNew
		l.mu.Unlock()
		if victim != nil {
			_ = victim.Close()
		}
		return c, nil
	}
}

// victim returns an idle connection, else the oldest one sending request headers, else nil
// (every connection runs a handler). The caller holds l.mu.
func (l *limitListener) victim() *conn {
	var oldest *conn
	for c, st := range l.conns {
		switch {
		case st == http.StateIdle:
			return c
		case c.handling.Load() == 0 && (oldest == nil || c.accepted.Before(oldest.accepted)):
			oldest = c
		}
	}
	return oldest
}

// track records each connection's state (http.Server.ConnState).
func (l *limitListener) track(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, open := l.conns[c]; open && st != http.StateClosed && st != http.StateHijacked {
		l.conns[c] = st
	}
}
