// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"context"
	"errors"
	"net"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/message"
)

// Broker states as the dashboard shows them (BrokerState.State).
const (
	// StateHealthy: the last send was acknowledged in time, or the name server accepts connections.
	StateHealthy = "healthy"
	// StateSlow: the last acknowledged send took SlowSend or longer, or a send went
	// unanswered (a timeout, a dropped connection) within the last minute; or a name server took
	// SlowDial or longer to accept a connection.
	StateSlow = "slow"
	// StateFailing: the broker is down (its circuit is open) or its sends fail for its own
	// reasons; a name server that does not accept a connection within DialTimeout.
	StateFailing = "failing"
	// StateRefusing: the broker answers but refuses the relay's configuration (ACL
	// permission or credentials, topic type); a name server refusing connections.
	StateRefusing = "refusing"
	// StateUnknown: no send went to the broker yet.
	StateUnknown = "unknown"
)

// Thresholds of the broker states.
const (
	// SlowSend is how long an acknowledged send may take before its broker is slow.
	SlowSend = time.Second
	// SlowDial is how long a name server may take to accept a connection before it is slow.
	SlowDial = 300 * time.Millisecond
	// DialTimeout bounds a name server probe.
	DialTimeout = time.Second
	// slowFor is how long an unanswered send keeps its broker slow.
	slowFor = time.Minute
)

// BrokerState is what the publisher knows of one broker or name server from its own sends
// and probes.
type BrokerState struct {
	// Name is the broker's name (as routes give it); empty for a name server.
	Name string `json:"name,omitempty"`
	// Addr is the address sends or probes went to.
	Addr string `json:"addr"`
	// State is one of StateHealthy, StateSlow, StateFailing, StateRefusing, StateUnknown;
	// Since is when it took that state.
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// LastError is the last failure, with when it happened; LastOK is the last acknowledged
	// send (or accepted connection) and LastDuration how long it took.
	LastError    string    `json:"last_error,omitempty"`
	LastErrorAt  time.Time `json:"last_error_at,omitempty"`
	LastOK       time.Time `json:"last_ok,omitempty"`
	LastDuration float64   `json:"last_duration_ms,omitempty"`
	// Circuit is the publisher's breaker of the broker: "closed" (sends go), "open" (the
	// broker is down: unordered messages go to other brokers, ordered keys of its queues wait,
	// one probe send a second). Empty for a name server.
	Circuit string `json:"circuit,omitempty"`
	// CircuitSince is when the circuit opened.
	CircuitSince time.Time `json:"circuit_since,omitempty"`
}

// brokerHealth records the outcome of every send per broker, and of name server probes.
type brokerHealth struct {
	now func() time.Time

	mu      sync.Mutex
	brokers map[string]*BrokerState // by address
	names   map[string]*BrokerState // name server address -> its last probe
}

func (h *brokerHealth) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

// entry returns the state of the broker at addr, creating it. Caller holds mu.
func (h *brokerHealth) entry(m map[string]*BrokerState, addr string, now time.Time) *BrokerState {
	if m[addr] == nil {
		m[addr] = &BrokerState{Addr: addr, State: StateUnknown, Since: now}
	}
	return m[addr]
}

func (s *BrokerState) set(state string, now time.Time) {
	if s.State != state {
		s.State, s.Since = state, now
	}
}

// update runs f on the state of the broker at addr (created when new) under mu.
func (h *brokerHealth) update(addr string, f func(s *BrokerState, now time.Time)) {
	if addr == "" {
		return
	}
	now := h.clock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.brokers == nil {
		h.brokers = map[string]*BrokerState{}
	}
	f(h.entry(h.brokers, addr, now), now)
}

// acked records a send to broker name at addr acknowledged after d.
func (h *brokerHealth) acked(name, addr string, d time.Duration) {
	h.update(addr, func(s *BrokerState, now time.Time) {
		s.Name, s.LastOK, s.LastDuration = name, now, float64(d.Microseconds())/1000
		if d >= SlowSend || (!s.LastErrorAt.IsZero() && now.Sub(s.LastErrorAt) < slowFor && s.State == StateSlow) {
			s.set(StateSlow, now)
			return
		}
		s.set(StateHealthy, now)
	})
}

// failed records a send to the broker at addr that failed with err (classified: a *SendError).
func (h *brokerHealth) failed(addr string, err error) {
	if err == nil {
		return
	}
	h.update(addr, func(s *BrokerState, now time.Time) {
		s.LastError, s.LastErrorAt = err.Error(), now
		switch message.KindOf(err) {
		case message.SendMisconfigured:
			s.set(StateRefusing, now)
		case message.SendUnreachable:
			s.set(StateFailing, now)
		case message.SendTransient:
			var se *message.SendError
			if errors.As(err, &se) && se.Code >= 0 {
				s.set(StateFailing, now) // busy, flow control, a system error: the broker's answer
			} else if s.State != StateFailing {
				s.set(StateSlow, now) // no answer in time, a dropped connection
			}
		}
	})
}

// BrokerStates returns what the publisher knows of each broker it sent to, by address, with
// its circuit; brokers it never sent to are not listed.
func (p *Publisher) BrokerStates() []BrokerState {
	down := p.queues.downSince()
	p.health.mu.Lock()
	out := make([]BrokerState, 0, len(p.health.brokers))
	for _, s := range p.health.brokers {
		out = append(out, *s)
	}
	p.health.mu.Unlock()
	for i := range out {
		out[i].Circuit = "closed"
		if d, ok := down[out[i].Name]; ok && out[i].Name != "" {
			out[i].Circuit, out[i].CircuitSince = "open", d.since
			if out[i].State != StateFailing {
				out[i].State, out[i].Since = StateFailing, d.since
			}
			if out[i].LastError == "" {
				out[i].LastError = d.err
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name+out[i].Addr < out[j].Name+out[j].Addr })
	return out
}

// downSince returns the brokers down now, by name.
func (c *queueChooser) downSince() map[string]downBroker {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]downBroker, len(c.down))
	for name, d := range c.down {
		out[name] = downBroker{since: d.since, err: d.err}
	}
	return out
}

// NameServerStates probes each configured name server with a TCP connection (closed at
// once, nothing sent) and returns their states: healthy, slow (SlowDial or longer),
// refusing (connection refused) or failing (no connection within DialTimeout, or another
// error). The probes run in parallel; the call takes at most DialTimeout.
func (p *Publisher) NameServerStates(ctx context.Context) []BrokerState {
	type probe struct {
		d   time.Duration
		err error
	}
	res := make([]probe, len(p.cfg.NameServers))
	var wg sync.WaitGroup
	for i, addr := range p.cfg.NameServers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			conn, err := (&net.Dialer{Timeout: DialTimeout}).DialContext(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
			}
			res[i] = probe{time.Since(start), err}
		}()
	}
	wg.Wait()
	return p.health.probed(p.cfg.NameServers, func(i int) (time.Duration, error) { return res[i].d, res[i].err })
}

// probed records the name servers' probes and returns their states, in order.
func (h *brokerHealth) probed(addrs []string, result func(int) (time.Duration, error)) []BrokerState {
	now := h.clock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.names == nil {
		h.names = map[string]*BrokerState{}
	}
	out := make([]BrokerState, len(addrs))
	for i, addr := range addrs {
		s := h.entry(h.names, addr, now)
		d, err := result(i)
		switch {
		case err == nil && d >= SlowDial:
			s.set(StateSlow, now)
		case err == nil:
			s.set(StateHealthy, now)
		case errors.Is(err, syscall.ECONNREFUSED):
			s.set(StateRefusing, now)
		default:
			s.set(StateFailing, now)
		}
		if err == nil {
			s.LastOK, s.LastDuration = now, float64(d.Microseconds())/1000
		} else {
			s.LastError, s.LastErrorAt = err.Error(), now
		}
		out[i] = *s
	}
	return out
}
