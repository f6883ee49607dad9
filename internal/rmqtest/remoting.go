// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"sync"

	"github.com/outbox-relay/outbox-relay/internal/remoting/frame"
)

// handler serves the commands of one listener. serve is called from the connection's
// read loop, in arrival order; it must not block for long (hand slow work to a
// goroutine). closed is called once when a connection ends; byPeer tells whether the
// client hung up (as opposed to us dropping it).
type handler interface {
	serve(c *conn, cmd *command)
	closed(c *conn, byPeer bool)
}

// listener is a remoting TCP server: one read loop per connection, responses written
// whole under a per-connection lock.
type listener struct {
	ln  net.Listener
	h   handler
	ser frame.Serialization // of every command written, answers included

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// listen serves h on addr, over TLS when tlsCfg is not nil, writing every command (answers
// included) with headers in ser.
func listen(addr string, h handler, tlsCfg *tls.Config, ser frame.Serialization) (*listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	l := &listener{ln: ln, h: h, ser: ser, conns: map[*conn]struct{}{}}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *listener) addr() string { return l.ln.Addr().String() }

func (l *listener) accept() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			return
		}
		c := &conn{nc: nc, l: l, done: make(chan struct{})}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = nc.Close()
			return
		}
		l.conns[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go c.readLoop()
	}
}

// close stops accepting, drops every connection and waits for the read loops to end.
func (l *listener) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	conns := make([]*conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	_ = l.ln.Close()
	for _, c := range conns {
		c.drop()
	}
	l.wg.Wait()
}

// conn is one client connection.
type conn struct {
	nc   net.Conn
	l    *listener
	wmu  sync.Mutex
	once sync.Once
	done chan struct{} // closed when the connection is gone

	dropped bool // set under once: we, not the peer, closed it
}

func (c *conn) readLoop() {
	defer c.l.wg.Done()
	r := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			c.finish(false)
			return
		}
		if cmd.IsResponse() {
			continue // answers to our oneway notifications; nothing waits for them
		}
		c.l.h.serve(c, cmd)
	}
}

// finish closes the connection once and tells the handler.
func (c *conn) finish(weDropped bool) {
	c.once.Do(func() {
		c.dropped = weDropped
		close(c.done)
		_ = c.nc.Close()
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		c.l.h.closed(c, !weDropped)
	})
}

// drop closes the connection from our side without answering anything still pending.
func (c *conn) drop() { c.finish(true) }

// isDone reports whether the connection has ended.
func (c *conn) isDone() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

var errConnDone = errors.New("rmqtest: connection closed")

// write sends one command.
func (c *conn) write(cmd *command) error {
	cmd.Serialization = c.l.ser
	if cmd.Language == "" {
		cmd.Language = serverLanguage
	}
	b, err := encodeCommand(cmd)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.isDone() {
		return errConnDone
	}
	if _, err := c.nc.Write(b); err != nil {
		go c.finish(false)
		return err
	}
	return nil
}

// reply answers req unless the client sent it oneway.
func (c *conn) reply(req, resp *command) {
	if req.IsOneway() {
		return
	}
	_ = c.write(resp)
}

func (c *conn) remoteAddr() net.Addr { return c.nc.RemoteAddr() }
