// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/schema"
)

// A parked row's fail_reason names its head (relay/park.go has the rules of parking): these
// are that reason and the statements that read parked rows and their heads.

// parkedPrefix starts the fail_reason of a parked row; the head's id follows it.
const parkedPrefix = "parked behind id "

// parkedReason is the fail_reason of a row parked behind the row head.
func parkedReason(head int64) string {
	return parkedPrefix + strconv.FormatInt(head, 10) + ": waits for its key's earlier unsent message"
}

// parkedHead returns the head a parked row's fail_reason names.
func parkedHead(reason string) (int64, bool) {
	rest, ok := strings.CutPrefix(reason, parkedPrefix)
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, ":")
	id, err := strconv.ParseInt(digits, 10, 64)
	return id, err == nil
}

// headState is what reviewParked reads of a parked key's head.
type headState struct {
	status int
	due    int64
}

// headStates reads the rows ids that are not deleted, by primary key.
func (s *store) headStates(ctx context.Context, ids []int64) (map[int64]headState, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	out := make(map[int64]headState, len(ids))
	for start := 0; start < len(ids); start += maxIDsPerStatement {
		chunk := ids[start:min(start+maxIDsPerStatement, len(ids))]
		rows, err := s.query(ctx, `SELECT id, status, next_retry_time FROM `+s.table+` FORCE INDEX (PRIMARY)
			WHERE id IN (`+placeholders(len(chunk))+`) AND `+schema.NotDeletedSQL, int64Args(chunk)...)
		if err != nil {
			return nil, fmt.Errorf("read the heads of parked keys in %s: %w", s.name, err)
		}
		for rows.Next() {
			var id int64
			var st headState
			if err := rows.Scan(&id, &st.status, &st.due); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read the heads of parked keys in %s: %w", s.name, err)
			}
			out[id] = st
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("read the heads of parked keys in %s: %w", s.name, err)
		}
	}
	return out, nil
}

// findParked returns the keys whose rows are parked (pending, due after nowMs, a reason of
// parkedReason), up to limit keys, each with the oldest head its rows name and their due
// time. It reads every parked row once, on the page query's index: a leader does it once a
// term.
func (s *store) findParked(ctx context.Context, nowMs int64, limit int) (map[orderKey]heldHead, error) {
	if err := s.scanIndex(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	where, args := s.partitionWhere(nil)
	rows, err := s.query(ctx, `SELECT COALESCE(topic, ''), COALESCE(sharding_key, ''), next_retry_time, fail_reason FROM `+s.table+s.scanHint+`
		WHERE `+where+`status = 0 AND next_retry_time > ? AND `+schema.NotDeletedSQL+` AND fail_reason LIKE ?
		GROUP BY 1, 2, 3, 4`, append(args, nowMs, likeEscape(parkedPrefix)+"%")...)
	if err != nil {
		return nil, fmt.Errorf("find parked rows of %s: %w", s.name, err)
	}
	defer rows.Close()
	out := map[orderKey]heldHead{}
	for rows.Next() {
		var k orderKey
		var due int64
		var reason string
		if err := rows.Scan(&k.topic, &k.key, &due, &reason); err != nil {
			return nil, fmt.Errorf("find parked rows of %s: %w", s.name, err)
		}
		head, ok := parkedHead(reason)
		if h, known := out[k]; !ok || (known && h.id < head) || (!known && len(out) >= limit) {
			continue
		}
		out[k] = heldHead{id: head, dueMs: due}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find parked rows of %s: %w", s.name, err)
	}
	return out, nil
}
