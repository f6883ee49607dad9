// SPDX-License-Identifier: Apache-2.0

package rocketmq

import "fmt"

// propertyMessageGroup is the message property RocketMQ 5.x reads as a FIFO message's group
// ("__SHARDINGKEY"; rocketmq-client-go names only 4.x's SHARDING_KEY).
const propertyMessageGroup = "__SHARDINGKEY"

// qualified is topic as the client sends it: "namespace%topic" with a namespace, which is
// also the name the producer's queue selector sees.
func (p *Publisher) qualified(topic string) string {
	if p.cfg.Namespace == "" {
		return topic
	}
	return p.cfg.Namespace + "%" + topic
}

// credentialName says which ACL credential the relay sends, for refusals of it.
func (p *Publisher) credentialName() string {
	if p.cfg.AccessKey == "" {
		return "no rocketmq.access_key configured"
	}
	return fmt.Sprintf("access key %s", p.cfg.AccessKey)
}
