// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// Failing fast on a dropped connection. rocketmq-client-go keeps a request pending until its
// deadline when the broker closes the connection it went on: the client drops the connection
// from its table on EOF (or on a failed write) but leaves the requests waiting on it. The
// watcher below notes the connection each send is written to (a remoting interceptor, called
// just before the write, on the connection the client chose), sees that connection leave the
// client's table, and cancels the sends still waiting for an answer on it within a few
// milliseconds, so that the publisher sends them again at once on the new connection: a copy
// when the broker had stored the message, which is what a lost acknowledgement costs anyway.
// It never guesses from timing: a send whose connection is still in the client's table, or
// whose answer the client read before the connection's EOF, is never given up, however slow
// the broker or late the client's goroutines (docs/decisions.md, "Dropped connections, slow
// sends, held keys and the poll (issue 21)").

// errConnectionDropped is the cause a watched send's context is cancelled with when the
// connection it waits on was closed.
var errConnectionDropped = errors.New("the connection the send waited on was closed")

// connWatchTick is how often the pending sends' connections are looked at.
const connWatchTick = 2 * time.Millisecond

// hookClient lets w watch the sends of prod, which must not be started yet: it installs w's
// remoting interceptor in the client behind prod so that the client's own interceptor (the
// ACL signer, with credentials) runs after it, and returns the func that tells, once prod is
// started, whether w's interceptor is the one the client calls. It returns nil when the
// client is not laid out as the pinned rocketmq-client-go is: the watcher is then off and a
// dropped connection costs its sends their timeout. TestConnWatchHooksTheClient fails when an
// upgrade of the client moves what it needs.
//
// The client's Start registers its ACL signer with RegisterInterceptor, which replaces the
// interceptor installed before (and which no one may call once the client runs: the field
// is read unguarded by every request). So, before Start, the signer is made here (the
// client's RegisterACL), chained behind ours, and the credentials are taken out of the
// client's options, which only Start and RegisterACL read: Start then registers nothing
// (docs/decisions.md, "The connection watcher with ACL credentials").
func (w *connWatch) hookClient(prod rocketmq.Producer) (active func() bool) {
	defer func() {
		if recover() != nil {
			active = nil
		}
	}()
	c, ok := clientOf(prod)
	if !ok {
		return nil
	}
	if !c.creds.IsEmpty() {
		c.rmq.RegisterACL()
		*c.creds = primitive.Credentials{}
	}
	ours := w.interceptor(c.conns, c.responses)
	if own := *c.interceptor; own != nil {
		c.remote.RegisterInterceptor(ours, own)
	} else {
		c.remote.RegisterInterceptor(ours)
	}
	return func() bool { return probeInterceptor(*c.interceptor) }
}

// pinnedClient is what the watcher uses of the pinned client's insides.
type pinnedClient struct {
	rmq    interface{ RegisterACL() } // *internal.rmqClient
	remote interface {
		RegisterInterceptor(...primitive.Interceptor)
	} // *remote.remotingClient
	// creds are the client's credentials (option.Credentials), interceptor the remoting
	// client's interceptor; conns and responses its tables of connections and of requests
	// waiting for an answer.
	creds            *primitive.Credentials
	interceptor      *primitive.Interceptor
	conns, responses *sync.Map
}

// clientOf finds the insides of prod's client, which must not be started yet.
func clientOf(prod rocketmq.Producer) (c pinnedClient, ok bool) {
	p := reflect.ValueOf(prod)
	if p.Kind() != reflect.Pointer || p.IsNil() {
		return c, false
	}
	state := field(p, "state") // in *producer.defaultProducer: created, not started
	if !state.IsValid() || state.Kind() != reflect.Int32 || atomic.LoadInt32((*int32)(addr(state))) != 0 {
		return c, false
	}
	v := field(p, "client")        // internal.RMQClient, a *internal.rmqClient
	rc := field(v, "remoteClient") // remote.RemotingClient, a *remote.remotingClient
	if !v.IsValid() || v.Kind() != reflect.Interface || !rc.IsValid() || rc.Kind() != reflect.Interface {
		return c, false
	}
	if c.rmq, ok = reflect.NewAt(v.Type(), addr(v)).Elem().Interface().(interface{ RegisterACL() }); !ok {
		return c, false
	}
	if c.remote, ok = reflect.NewAt(rc.Type(), addr(rc)).Elem().Interface().(interface {
		RegisterInterceptor(...primitive.Interceptor)
	}); !ok {
		return c, false
	}
	creds := field(field(v, "option"), "Credentials")
	icpt := field(rc, "interceptor")
	table, responses := field(rc, "connectionTable"), field(rc, "responseTable")
	if !typed[primitive.Credentials](creds) || !typed[primitive.Interceptor](icpt) ||
		!typed[sync.Map](table) || !typed[sync.Map](responses) {
		return c, false
	}
	c.creds, c.interceptor = (*primitive.Credentials)(addr(creds)), (*primitive.Interceptor)(addr(icpt))
	c.conns, c.responses = (*sync.Map)(addr(table)), (*sync.Map)(addr(responses))
	return c, true
}

// field returns the field name of the struct v is, points to or holds, or the zero Value.
func field(v reflect.Value, name string) reflect.Value {
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer) {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v.FieldByName(name)
}

// typed reports whether v is an addressable field of type T.
func typed[T any](v reflect.Value) bool {
	return v.IsValid() && v.Type() == reflect.TypeFor[T]() && v.CanAddr()
}

// addr is the address of the addressable field v.
func addr(v reflect.Value) unsafe.Pointer { return unsafe.Pointer(v.UnsafeAddr()) }

// probeKey marks the context of probeInterceptor's call, which the watcher's interceptor
// answers with errProbed without going on.
type probeKey struct{}

var errProbed = errors.New("the connection watcher's interceptor runs first")

// probeInterceptor reports whether the watcher's interceptor is the first that installed
// calls (nil: none is). A client's own interceptor called first with the probe's nil request
// panics or fails otherwise: not active.
func probeInterceptor(installed primitive.Interceptor) (active bool) {
	defer func() {
		if recover() != nil {
			active = false
		}
	}()
	if installed == nil {
		return false
	}
	err := installed(context.WithValue(context.Background(), probeKey{}, true), nil, nil,
		func(context.Context, any, any) error { return nil })
	return errors.Is(err, errProbed)
}

// connWatch cancels sends whose connection the client dropped. It runs as a service
// (internal/startstop) from the first watched producer until the publisher is closed: its
// goroutine looks at the pending sends every connWatchTick while there are any, and waits
// for the next otherwise.
type connWatch struct {
	mu      sync.Mutex
	pending map[*watchedSend]struct{}
	wake    chan struct{} // holds a signal once a send is watched while none was; nil: not started
	svc     *startstop.Func
}

// start starts the watcher unless it runs; the publisher calls it and stop under its lock.
func (w *connWatch) start() {
	w.mu.Lock()
	if w.svc == nil {
		w.wake = make(chan struct{}, 1)
		w.svc = startstop.New(w.run)
	}
	w.mu.Unlock()
	_ = w.svc.Start(context.Background()) // a Func never fails to start
}

// stop stops the watcher and waits for its goroutine to end.
func (w *connWatch) stop() {
	w.mu.Lock()
	svc := w.svc
	w.mu.Unlock()
	if svc != nil {
		svc.Stop()
	}
}

// watchedSend is one send waiting for its answer.
type watchedSend struct {
	conns     *sync.Map // the client's connections by broker address
	responses *sync.Map // the client's requests waiting for an answer, by opaque
	opaque    int32     // the send's request
	addr      string
	conn      any       // the connection the send was written to; nil: not written yet
	goneAt    time.Time // when conn was first seen gone from the table
	cancel    context.CancelCauseFunc
}

type watchKey struct{}

// watch returns ctx, cancelled with errConnectionDropped when the connection the send is
// written to is closed, and the func that ends the watch (call it when the send returns).
func (w *connWatch) watch(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	s := &watchedSend{cancel: cancel}
	ctx = context.WithValue(ctx, watchKey{}, s)
	w.mu.Lock()
	if w.pending == nil {
		w.pending = map[*watchedSend]struct{}{}
	}
	w.pending[s] = struct{}{}
	if len(w.pending) == 1 && w.wake != nil {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
	return ctx, func() {
		w.mu.Lock()
		delete(w.pending, s)
		w.mu.Unlock()
		cancel(nil)
	}
}

// interceptor is the remoting interceptor of a client whose connections are conns and whose
// requests waiting for an answer are responses: the client calls it with the connection it
// chose in its table, just before writing a request. It notes that connection and the
// request's opaque for the watched send the request belongs to.
func (w *connWatch) interceptor(conns, responses *sync.Map) primitive.Interceptor {
	return func(ctx context.Context, req, reply any, next primitive.Invoker) error {
		if ctx.Value(probeKey{}) != nil {
			return errProbed
		}
		if s, ok := ctx.Value(watchKey{}).(*watchedSend); ok {
			pc, ok := primitive.GetProducerCtx(ctx)
			if opaque, known := opaqueOf(req); ok && known && pc.BrokerAddr != "" {
				conn, _ := conns.Load(pc.BrokerAddr)
				w.mu.Lock()
				s.conns, s.responses, s.opaque, s.addr, s.conn = conns, responses, opaque, pc.BrokerAddr, conn
				w.mu.Unlock()
			}
		}
		return next(ctx, req, reply)
	}
}

// opaqueOf returns the opaque (request id) of the client's request req.
func opaqueOf(req any) (opaque int32, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	v := reflect.ValueOf(req)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return 0, false
	}
	f := v.Elem().FieldByName("Opaque") // *remote.RemotingCommand
	if !f.IsValid() || f.Kind() != reflect.Int32 {
		return 0, false
	}
	return int32(f.Int()), true
}

// run watches the pending sends while there are any, until ctx ends.
func (w *connWatch) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		w.watchWhilePending(ctx)
	}
}

// watchWhilePending looks at the pending sends every connWatchTick until there are none.
func (w *connWatch) watchWhilePending(ctx context.Context) {
	t := time.NewTicker(connWatchTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if !w.sweep(now) {
				return
			}
		}
	}
}

// sweep cancels the pending sends whose connection is gone from the client's table without
// their answer, and reports whether any send is still pending.
func (w *connWatch) sweep(now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.pending {
		if s.conn == nil {
			continue // not written yet
		}
		cur, _ := s.conns.Load(s.addr)
		switch {
		case cur == s.conn:
		case s.goneAt.IsZero():
			// Gone from the table: the client read EOF or failed a write on it. Look
			// again at the next tick: the client removes it before closing it.
			s.goneAt = now
		default:
			if _, waiting := s.responses.Load(s.opaque); waiting {
				// The client reads a connection's answers before its EOF, and takes
				// each out of its table of waiting requests: this one's never came.
				s.cancel(errConnectionDropped)
			}
			// Else its answer was read and is on its way to the sender: no copy.
			delete(w.pending, s)
		}
	}
	return len(w.pending) > 0
}
