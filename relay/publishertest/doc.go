// SPDX-License-Identifier: Apache-2.0

// Package publishertest is the conformance suite of relay.Publisher: Run sends through a
// publisher to a real broker, reads back what the broker stores, and fails a subtest for
// each part of the contract the publisher breaks. It is the contract relay.Publisher's
// documentation states and the relay relies on, as subtests:
//
//   - Acknowledgement: a nil error means the broker stores the message with its body
//     (byte for byte), tag, keys, OUTBOX_MSG_ID and user properties; Send is safe from
//     many goroutines; a Send of nothing is a no-op; a cancelled context is no
//     acknowledgement.
//   - Batch: several messages given to one Send are acknowledged whole, or fail whole
//     (none stored) as relay.SendRefused, so that the relay sends them one by one.
//   - FailureKinds: each failure carries the relay.SendErrorKind the failure accounting of
//     docs/decisions.md needs: a missing topic, an oversized message, a refused
//     configuration; with Target.Faults also a busy, read-only, slow or stopped broker,
//     a dropped connection, a lost acknowledgement, a refusal by response code, a message
//     stored without replication.
//   - KeyedBatches (a relay.KeyBatcher only): QueueOf names each key's queue, and keys
//     named alike go in one batch to that queue, in the batch's order.
//   - OrderedKeys: on an ordered route, one sharding key's messages are stored in one
//     queue in the order sent, by this publisher and by the next one.
//
// A Target says how to make publishers and topics and how to read the broker's store.
// docs/testing.md says which targets the project runs it on.
package publishertest
