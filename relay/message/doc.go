// SPDX-License-Identifier: Apache-2.0

// Package message holds the types the relay's engine and its publishers share: the Message
// one outbox row becomes, the Route it is published by and the Router that chooses it, the
// Publisher interface (with KeyBatcher), and the failure vocabulary a Publisher answers with
// (SendError and its SendErrorKind; the older marks Permanent, Refused, AtBroker,
// ErrTopicNotFound and ErrBrokerUnreachable are deprecated and still read by KindOf). It
// imports nothing of the relay, so that the
// engine (package relay), the RocketMQ adapter (package relay/rocketmq) and tests of any
// publisher can all import it.
package message
