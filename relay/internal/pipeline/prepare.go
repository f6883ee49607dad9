// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/message"
)

// routeKey is a topic and tag, the inputs of validation and routing.
type routeKey struct{ topic, tag string }

// routed is the route of a topic and tag, or why they can never be sent: invalid names, or
// no route under strict routing (checked after the body, as it always was).
type routed struct {
	route            Route
	invalid, noRoute error
}

// routeOf validates topic and tag and finds their route, once per distinct pair of a page:
// a page holds few distinct ones, and validating a topic runs a regular expression and
// routing may match patterns (a third of prepare's CPU in the drain profile).
func (r *Engine) routeOf(topic, tag string, seen map[routeKey]routed) routed {
	k := routeKey{topic, tag}
	if rt, ok := seen[k]; ok {
		return rt
	}
	var rt routed
	if err := outbox.ValidateTopic(topic); err != nil {
		rt.invalid = fmt.Errorf("invalid topic: %w", err)
	} else if err := outbox.ValidateTag(tag); err != nil {
		rt.invalid = fmt.Errorf("invalid tag: %w", err)
	} else if route, ok := r.cfg.Router.Route(topic, tag); ok {
		rt.route = route
	} else if r.cfg.Unrouted == UnroutedDead {
		rt.noRoute = fmt.Errorf("no route for topic %q tag %q (relay.unrouted is dead)", topic, tag)
	}
	seen[k] = rt
	return rt
}

// prepare turns a row into a message and finds its route (remembered in routes); an error is
// permanent: the row can never be sent as it is.
func (r *Engine) prepare(rw *outboxsql.Row, routes map[routeKey]routed) (*Message, Route, error) {
	rt := r.routeOf(rw.Topic, rw.Tag, routes)
	if rt.invalid != nil {
		return nil, Route{}, rt.invalid
	}
	m, err := message.FromRow(message.Row{ID: rw.ID, MsgID: rw.MsgID, Topic: rw.Topic, Tag: rw.Tag, Keys: rw.Keys,
		ShardingKey: rw.ShardingKey, Props: rw.Properties.String, Body: rw.Content, BodyLen: rw.ContentLen}, r.cfg.MaxBodyBytes)
	if err != nil {
		return nil, Route{}, err
	}
	if rt.noRoute != nil {
		return nil, Route{}, rt.noRoute
	}
	m.RetryCount, m.MaxRetries = rw.RetryCount, rw.MaxRetries
	return m, rt.route, nil
}

// prepareItems turns the rows of a page into items, at their row's index; a row that is not
// sent this time is left out, with its result: a malformed row dead, a row of a topic the
// broker refuses for the relay's configuration deferred (one probes it per backoff), a row
// held by a late unit none at all. It returns the rows held behind the head of their ordered
// key that an earlier page of the pass found (blocked): hold parks them (parkHeld).
func (r *Engine) prepareItems(rows []outboxsql.Row, pass uint64, blocked blockedKeys, results []result, start time.Time) ([]item, heldRows) {
	items := make([]item, len(rows))
	routes := map[routeKey]routed{}
	var hold heldRows
	inPage := blocked.pageIDs(rows)
	r.inflightMu.Lock()
	anyInflight := len(r.inflight) > 0 || len(r.settled) > 0
	r.inflightMu.Unlock()
	for i := range rows {
		if anyInflight && r.heldByLateUnit(rows[i].ID, pass) {
			// A late unit of an earlier page publishes it, or published it after this page
			// was read: results[i] stays zero, which the completer leaves alone.
			continue
		}
		msg, route, err := r.prepare(&rows[i], routes)
		if err != nil {
			results[i] = result{kind: dead, reason: err.Error()}
			continue
		}
		if k, h, held := blocked.holds(msg, route, rows[i].ID, inPage); held {
			hold.add(k, h, rows[i].ID)
			continue
		}
		if wait, last, held := r.incidents.holdMisconfigured(msg.Topic, start); held {
			// The broker refuses the topic for the relay's configuration: one row probes it
			// per backoff, the others wait unsent (their retry count untouched).
			results[i] = result{kind: deferred, delay: wait, reason: last + misconfiguredMark, unsent: true}
			continue
		}
		items[i] = item{row: &rows[i], msg: msg, route: route}
	}
	return items, hold
}
