// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"strconv"
)

// Request and response codes of topic administration and write permission.
const (
	reqUpdateAndCreateTopic int16 = 17
	resNoPermission         int16 = 16
	permRead                      = 4
)

// CreateTopic creates topic with n queues (readable and writable) if it does not exist, as
// RocketMQ's admin updateTopic does; the admin API of rocketmq-client-go works too.
func (s *Server) CreateTopic(topic string, n int) {
	if n <= 0 {
		n = s.opts.Queues
	}
	s.store.ensureTopic(topic, n)
}

// SetBrokerPermission sets the broker's permission as RocketMQ's brokerPermission setting
// does: 6 read and write, 4 read only. A read-only broker's routes are read-only, so clients
// stop choosing its queues at their next route refresh; like RocketMQ it still stores sends
// of clients whose route is older (RocketMQ refuses them only for ordered topics).
func (s *Server) SetBrokerPermission(perm int) { s.perm.Store(int32(perm)) }

// SetMaxMessageSize changes the largest message the broker accepts, as RocketMQ's
// updateBrokerConfig of maxMessageSize does.
func (s *Server) SetMaxMessageSize(n int) { s.maxMsgSize.Store(int64(n)) }

// createTopic serves UPDATE_AND_CREATE_TOPIC.
func (b *broker) createTopic(c *conn, req *command) {
	topic := req.Ext["topic"]
	if why := checkTopic(topic); why != "" {
		c.reply(req, newResponse(req, resSystemError, why))
		return
	}
	n, _ := strconv.Atoi(req.Ext["writeQueueNums"])
	b.s.CreateTopic(topic, n)
	c.reply(req, newResponse(req, resSuccess, ""))
}

// withCluster adds the CLUSTER property RocketMQ's broker puts on every message it stores.
func (s *Server) withCluster(props string) string {
	m := parseProperties(props)
	m[propCluster] = s.opts.ClusterName
	return formatProperties(m)
}
