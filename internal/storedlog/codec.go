// SPDX-License-Identifier: Apache-2.0

// Package storedlog is the format of the stored-position journal (schema.StoredLogDDL):
// where the broker stored each sent outbox row, appended once per write-back as one
// compact entry instead of columns written into every row. The broker audit reads it back.
//
// An entry's positions column holds, in order: the format version (1 byte, 1); the number
// of broker names and each name (uvarint length, bytes); the number of rows; then per row
// the id's difference from the previous row's (zig-zag varint; the first from 0), the
// broker's index in the names and the queue id (uvarints), the queue offset's difference
// from the previous offset in the same queue of the same broker (zig-zag varint; the first
// from 0), and the commit log offset plus one (0: unknown) as its difference from the
// previous such value of the same broker (zig-zag varint; the first from 0). The
// differences keep a page's rows to about 6 bytes each: a batch's offsets are consecutive
// and its commit log offsets a message's size apart. Decode checks every count and value
// against the bytes present and the limits below, so a damaged or forged entry is refused,
// never trusted.
package storedlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Version is the format's version byte.
const Version = 1

// Limits an entry must keep (Encode refuses more, Decode refuses more).
const (
	// MaxRows is the most rows one entry holds.
	MaxRows = 100_000
	// MaxBrokers is the most distinct broker names one entry holds.
	MaxBrokers = 1024
	// MaxBrokerName is the longest broker name, in bytes.
	MaxBrokerName = 255
	// MaxQueueID is the highest queue id.
	MaxQueueID = math.MaxInt32
)

// Pos is where the broker stored one row's message.
type Pos struct {
	// ID is the outbox row's id.
	ID int64
	// Broker is the name of the broker whose queue holds the message.
	Broker string
	// QueueID and Offset are the queue and the message's offset in it.
	QueueID int
	Offset  int64
	// CommitOffset is the broker's commit log offset of the message; -1 when unknown.
	CommitOffset int64
}

// ErrCorrupt marks an entry Decode refuses.
var ErrCorrupt = errors.New("storedlog: corrupt entry")

// Encode returns the positions column of an entry holding ps (in the order given; ids
// need not be sorted). It refuses what Decode would: no rows, more than MaxRows rows or
// MaxBrokers brokers, an empty or too long broker name, a negative id, queue or offset.
func Encode(ps []Pos) ([]byte, error) {
	if len(ps) == 0 || len(ps) > MaxRows {
		return nil, fmt.Errorf("storedlog: an entry holds 1 to %d rows, not %d", MaxRows, len(ps))
	}
	index := map[string]uint64{}
	var names []string
	for _, p := range ps {
		if err := p.check(); err != nil {
			return nil, err
		}
		if _, ok := index[p.Broker]; !ok {
			index[p.Broker] = uint64(len(names))
			names = append(names, p.Broker)
		}
	}
	if len(names) > MaxBrokers {
		return nil, fmt.Errorf("storedlog: an entry names at most %d brokers, not %d", MaxBrokers, len(names))
	}
	b := make([]byte, 0, 16+8*len(ps))
	b = append(b, Version)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		b = binary.AppendUvarint(b, uint64(len(n)))
		b = append(b, n...)
	}
	b = binary.AppendUvarint(b, uint64(len(ps)))
	var last lastSeen
	prev := int64(0)
	for _, p := range ps {
		b = binary.AppendVarint(b, p.ID-prev)
		prev = p.ID
		broker := index[p.Broker]
		b = binary.AppendUvarint(b, broker)
		b = binary.AppendUvarint(b, uint64(p.QueueID))
		q := queueKey{broker, p.QueueID}
		b = binary.AppendVarint(b, p.Offset-last.offset(q))
		b = binary.AppendVarint(b, p.CommitOffset+1-last.commit(broker))
		last.see(q, p.Offset, p.CommitOffset+1)
	}
	return b, nil
}

func (p Pos) check() error {
	switch {
	case p.ID <= 0:
		return fmt.Errorf("storedlog: row id %d is not positive", p.ID)
	case p.Broker == "" || len(p.Broker) > MaxBrokerName:
		return fmt.Errorf("storedlog: broker name of row %d has %d bytes (1 to %d)", p.ID, len(p.Broker), MaxBrokerName)
	case p.QueueID < 0 || p.QueueID > MaxQueueID:
		return fmt.Errorf("storedlog: queue id %d of row %d is out of range", p.QueueID, p.ID)
	case p.Offset < 0 || p.CommitOffset < -1 || p.CommitOffset == math.MaxInt64:
		return fmt.Errorf("storedlog: offsets %d/%d of row %d are out of range", p.Offset, p.CommitOffset, p.ID)
	}
	return nil
}

// Decode returns the positions of an entry's positions column, or an error wrapping
// ErrCorrupt that says what is wrong.
func Decode(b []byte) ([]Pos, error) {
	d := decoder{b: b}
	if len(b) == 0 || b[0] != Version {
		return nil, fmt.Errorf("%w: not format version %d", ErrCorrupt, Version)
	}
	d.b = b[1:]
	nNames := d.count("broker names", MaxBrokers, 2)
	names := make([]string, 0, nNames)
	for range nNames {
		names = append(names, d.name())
	}
	nRows := d.count("rows", MaxRows, 5)
	if d.err == nil && nRows == 0 {
		d.fail("no rows")
	}
	ps := make([]Pos, 0, nRows)
	var last lastSeen
	id := int64(0)
	for i := 0; i < nRows && d.err == nil; i++ {
		id = d.nextID(id)
		broker := d.uint("broker index", uint64(max(len(names)-1, 0)))
		if d.err == nil && len(names) == 0 {
			d.fail("a row names no broker")
		}
		queue := int(d.uint("queue id", MaxQueueID))
		q := queueKey{broker, queue}
		offset := d.plus("queue offset", last.offset(q))
		commit := d.plus("commit offset", last.commit(broker))
		if d.err != nil {
			break
		}
		last.see(q, offset, commit)
		ps = append(ps, Pos{ID: id, Broker: names[broker], QueueID: queue, Offset: offset, CommitOffset: commit - 1})
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the last row", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return ps, nil
}

// decoder reads an entry, keeping its first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

// uint reads a uvarint of at most limit.
func (d *decoder) uint(what string, limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("%s is truncated or overlong", what)
		return 0
	}
	d.b = d.b[n:]
	if v > limit {
		d.fail("%s %d is over %d", what, v, limit)
		return 0
	}
	return v
}

// count reads a count of at most limit items of at least minBytes bytes each, so that no
// count claims more than the bytes left could hold.
func (d *decoder) count(what string, limit, minBytes int) int {
	n := int(d.uint(what, uint64(limit)))
	if d.err == nil && n > len(d.b)/minBytes+1 {
		d.fail("%d %s do not fit in %d bytes", n, what, len(d.b))
		return 0
	}
	return n
}

func (d *decoder) name() string {
	n := int(d.uint("broker name length", MaxBrokerName))
	if d.err == nil && (n == 0 || n > len(d.b)) {
		d.fail("broker name of %d bytes with %d left", n, len(d.b))
	}
	if d.err != nil {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// nextID reads a row id's difference from prev and returns the id, which must be positive.
func (d *decoder) nextID(prev int64) int64 {
	if d.err != nil {
		return 0
	}
	delta, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("row id is truncated or overlong")
		return 0
	}
	d.b = d.b[n:]
	id := prev + delta
	if (delta > 0 && id < prev) || id <= 0 {
		d.fail("row id %d%+d is out of range", prev, delta)
		return 0
	}
	return id
}

// plus reads a zig-zag difference from prev and returns prev plus it, which must not be
// negative (nor overflow).
func (d *decoder) plus(what string, prev int64) int64 {
	if d.err != nil {
		return 0
	}
	delta, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("%s is truncated or overlong", what)
		return 0
	}
	d.b = d.b[n:]
	v := prev + delta
	if (delta > 0 && v < prev) || (delta < 0 && v > prev) || v < 0 {
		d.fail("%s %d%+d is out of range", what, prev, delta)
		return 0
	}
	return v
}

// queueKey is one queue of one broker (its index in the entry's names).
type queueKey struct {
	broker uint64
	queue  int
}

// lastSeen is what the rows so far left as the base of the next row's differences: the
// last offset of each queue and the last commit offset (plus one) of each broker.
type lastSeen struct {
	offsets map[queueKey]int64
	commits map[uint64]int64
}

func (l *lastSeen) offset(q queueKey) int64 { return l.offsets[q] }

func (l *lastSeen) commit(broker uint64) int64 { return l.commits[broker] }

func (l *lastSeen) see(q queueKey, offset, commitPlusOne int64) {
	if l.offsets == nil {
		l.offsets, l.commits = map[queueKey]int64{}, map[uint64]int64{}
	}
	l.offsets[q] = offset
	l.commits[q.broker] = commitPlusOne
}
