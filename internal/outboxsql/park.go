// SPDX-License-Identifier: Apache-2.0

package outboxsql

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/schema"
)

// A parked row's fail_reason names its head (relay/internal/pipeline/park.go has the rules of parking): these
// are that reason and the statements that read parked rows and their heads.

// parkedPrefix starts the fail_reason of a parked row; the head's id follows it.
const parkedPrefix = "parked behind id "

// ParkedReason is the fail_reason of a row parked behind the row head.
func ParkedReason(head int64) string {
	return parkedPrefix + strconv.FormatInt(head, 10) + ": waits for its key's earlier unsent message"
}

// ParkedHead returns the head a parked row's fail_reason names.
func ParkedHead(reason string) (int64, bool) {
	rest, ok := strings.CutPrefix(reason, parkedPrefix)
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, ":")
	id, err := strconv.ParseInt(digits, 10, 64)
	return id, err == nil
}

// HeadState is what reviewParked reads of a parked key's head.
type HeadState struct {
	Status int
	Due    int64
}

// HeadStates reads the rows ids that are not deleted, by primary key.
func (s *Store) HeadStates(ctx context.Context, ids []int64) (map[int64]HeadState, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	out := make(map[int64]HeadState, len(ids))
	_, err := s.inChunks(len(ids), "read the heads of %d parked keys in %s", func(start, end int) (int64, error) {
		chunk := ids[start:end]
		rows, err := s.Query(ctx, `SELECT id, status, next_retry_time FROM `+s.Table+` FORCE INDEX (PRIMARY)
			WHERE id IN (`+placeholders(len(chunk))+`) AND `+schema.NotDeletedSQL, int64Args(chunk)...)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var st HeadState
			if err := rows.Scan(&id, &st.Status, &st.Due); err != nil {
				return 0, err
			}
			out[id] = st
		}
		return 0, rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// FindParked returns the keys whose rows are parked (pending, due after nowMs, a reason of
// parkedReason), up to limit keys, each with the oldest head its rows name and their due
// time. It reads every parked row once, on the page query's index: a leader does it once a
// term.
func (s *Store) FindParked(ctx context.Context, nowMs int64, limit int) (map[OrderKey]HeldHead, error) {
	if err := s.ScanIndex(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	where, args := s.partitionWhere(nil)
	rows, err := s.Query(ctx, `SELECT COALESCE(topic, ''), COALESCE(sharding_key, ''), next_retry_time, fail_reason FROM `+s.Table+s.scanHint+`
		WHERE `+where+`status = 0 AND next_retry_time > ? AND `+schema.NotDeletedSQL+` AND fail_reason LIKE ?
		GROUP BY 1, 2, 3, 4`, append(args, nowMs, likeEscape(parkedPrefix)+"%")...)
	if err != nil {
		return nil, fmt.Errorf("find parked rows of %s: %w", s.Name, err)
	}
	defer rows.Close()
	out := map[OrderKey]HeldHead{}
	for rows.Next() {
		var k OrderKey
		var due int64
		var reason string
		if err := rows.Scan(&k.Topic, &k.Key, &due, &reason); err != nil {
			return nil, fmt.Errorf("find parked rows of %s: %w", s.Name, err)
		}
		head, ok := ParkedHead(reason)
		if h, known := out[k]; !ok || (known && h.ID < head) || (!known && len(out) >= limit) {
			continue
		}
		out[k] = HeldHead{ID: head, DueMs: due}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find parked rows of %s: %w", s.Name, err)
	}
	return out, nil
}
