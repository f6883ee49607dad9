// SPDX-License-Identifier: Apache-2.0

// Package rocketmq is the relay's RocketMQ adapter: a message.Publisher (Publisher, made by
// NewPublisher from a Config) built on rocketmq-client-go. It chooses each message's queue
// (queues.go), reads the client's errors and send statuses into a message.SendError of one
// kind (classify.go, the only place that reads them), fails a send at once when the
// connection it waits on is dropped (connwatch.go), qualifies topics and credentials for
// namespaced deployments (deploy.go), and keeps each broker's and name server's state for
// the dashboard (brokerhealth.go). It imports only the relay's shared types (relay/message)
// and its metrics (relay/metrics): package relay links no RocketMQ client.
package rocketmq
