// SPDX-License-Identifier: Apache-2.0

// Package brokersuite runs the same integration tests against two brokers: rmqtest (the
// in-process protocol broker) and a real Apache RocketMQ started by scripts/rocketmq.sh. The
// relay runs as the outbox-relay binary, messages are read back with a real push consumer, and
// each test says what users rely on: rows delivered, byte for byte, in order, once.
//
// Faults that change a broker (kill -9 and restart, read-only, a smaller maxMessageSize) run
// on a second real broker, broker-fault, that the suite starts on the same name server
// (scripts/rocketmq.sh broker-start), so the tests on broker-a never see them.
package brokersuite
