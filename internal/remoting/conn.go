// SPDX-License-Identifier: Apache-2.0

package remoting

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Request codes of the transactional-message protocol.
const (
	// HeartBeat registers a client's producer and consumer groups with a broker.
	HeartBeat int16 = 34
	// UnregisterClient removes a client's group from a broker.
	UnregisterClient int16 = 35
	// EndTransaction commits or rolls back a half message.
	EndTransaction int16 = 37
	// CheckTransactionState is the broker asking a producer of a half's group for its outcome.
	CheckTransactionState int16 = 39
)

const flagOneway int32 = 1 << 1

// Request is a request a broker sent on a Conn (a check-back, say).
type Request struct {
	// Code is the request code.
	Code int16
	// Ext holds the header's extension fields.
	Ext map[string]string
	// Body is the payload.
	Body []byte
}

// ErrClosed is returned by the calls of a Conn that has closed.
var ErrClosed = errors.New("remoting: connection closed")

// Conn is a long-lived connection to one broker: requests and their answers matched by
// opaque, and requests the broker sends (check-backs) handed to a handler. It is safe for
// concurrent use.
type Conn struct {
	addr    string
	creds   Credentials
	nc      net.Conn
	handle  func(*Conn, *Request)
	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[int32]chan *Response
	done    chan struct{}
	once    sync.Once
	err     error
}

// Dial connects to addr. handle, when not nil, receives every request the broker sends, on
// the connection's read loop: it must not block (queue the work, bounded, or drop it), for
// answers are read by the same loop. No goroutine is started per request, so a flood of
// requests costs nothing but the handler's own queue. WithCredentials signs the requests the
// connection sends; WithTLS encrypts it as Call does.
func Dial(ctx context.Context, addr string, handle func(*Conn, *Request), opts ...Option) (*Conn, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	nc, err := dialer(o).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("remoting: dial %s: %w", addr, err)
	}
	c := &Conn{addr: addr, creds: o.creds, nc: nc, handle: handle, pending: map[int32]chan *Response{}, done: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// Addr returns the address the connection was dialled to.
func (c *Conn) Addr() string { return c.addr }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close closes the connection; calls in flight fail with ErrClosed. Safe to call twice.
func (c *Conn) Close() error {
	c.finish(ErrClosed)
	return nil
}

func (c *Conn) finish(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
		_ = c.nc.Close()
	})
}

func (c *Conn) readLoop() {
	r := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		h, body, err := read(r)
		if err != nil {
			c.finish(fmt.Errorf("%w: %s: %w", ErrClosed, c.addr, err))
			return
		}
		if h.Flag&1 == 0 {
			if c.handle != nil {
				c.handle(c, &Request{Code: h.Code, Ext: h.ExtFields, Body: body})
			}
			continue
		}
		c.mu.Lock()
		ch := c.pending[h.Opaque]
		delete(c.pending, h.Opaque)
		c.mu.Unlock()
		if ch != nil {
			ch <- &Response{Code: h.Code, Remark: h.Remark, Ext: h.ExtFields, Body: body}
		}
	}
}

func (c *Conn) write(ctx context.Context, h header, body []byte) error {
	frame, err := encode(h, body)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(3 * time.Second)
	}
	_ = c.nc.SetWriteDeadline(dl)
	if _, err := c.nc.Write(frame); err != nil {
		c.finish(err)
		return fmt.Errorf("remoting: write to %s: %w", c.addr, err)
	}
	return nil
}

// Invoke sends a request and waits for its answer until ctx ends (3 s when ctx has no
// deadline).
func (c *Conn) Invoke(ctx context.Context, code int16, ext map[string]string, body []byte) (*Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
	}
	id := opaque.Add(1)
	ch := make(chan *Response, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.write(ctx, header{Code: code, Language: "GO", Version: 399, Opaque: id, ExtFields: c.creds.sign(ext, body)}, body); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-c.done:
		return nil, fmt.Errorf("remoting: %s: %w", c.addr, ErrClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("remoting: waiting for %s: %w", c.addr, ctx.Err())
	}
}

// Oneway sends a request the broker does not answer.
func (c *Conn) Oneway(ctx context.Context, code int16, ext map[string]string, body []byte) error {
	return c.write(ctx, header{Code: code, Language: "GO", Version: 399, Opaque: opaque.Add(1), Flag: flagOneway, ExtFields: c.creds.sign(ext, body)}, body)
}
