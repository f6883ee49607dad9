// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

const (
	retryTopicPrefix = "%RETRY%"
	dlqTopicPrefix   = "%DLQ%"
	// permReadWrite is PermName.PERM_READ|PERM_WRITE: consumers need the read bit,
	// producers the write bit.
	permReadWrite = 6
	// maxTopicLength is RocketMQ 4.x's topic length limit.
	maxTopicLength = 127
)

var validTopic = regexp.MustCompile(`^[%|a-zA-Z0-9_-]+$`)

// checkTopic returns why a topic name is not acceptable, or "" if it is.
func checkTopic(t string) string {
	switch {
	case t == "":
		return "the specified topic is blank"
	case len(t) > maxTopicLength:
		return "the specified topic is longer than topic max length 127"
	case !validTopic.MatchString(t):
		return "the specified topic[" + t + "] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
	}
	return ""
}

// queuesFor is the queue count of a topic created on first use.
func (s *Server) queuesFor(topic string) int {
	if strings.HasPrefix(topic, retryTopicPrefix) || strings.HasPrefix(topic, dlqTopicPrefix) {
		return 1
	}
	return s.opts.Queues
}

// topic returns the topic's queue count, creating the topic on first use.
func (s *Server) topic(name string) int {
	return len(s.store.ensureTopic(name, s.queuesFor(name)).queues)
}

// nameServer answers route queries: every valid topic lives on our one broker, as
// master (broker id 0), readable and writable.
type nameServer struct{ s *Server }

type routeQueueData struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int    `json:"readQueueNums"`
	WriteQueueNums int    `json:"writeQueueNums"`
	Perm           int    `json:"perm"`
	TopicSynFlag   int    `json:"topicSynFlag"`
}

type routeBrokerData struct {
	Cluster     string           `json:"cluster"`
	BrokerName  string           `json:"brokerName"`
	BrokerAddrs map[int64]string `json:"brokerAddrs"`
}

type routeData struct {
	OrderTopicConf string            `json:"orderTopicConf,omitempty"`
	QueueDatas     []routeQueueData  `json:"queueDatas"`
	BrokerDatas    []routeBrokerData `json:"brokerDatas"`
}

func (n *nameServer) serve(c *conn, req *command) {
	s := n.s
	switch req.Code {
	case reqGetRouteInfoByTopic:
		topic := req.Ext["topic"]
		if checkTopic(topic) != "" || !s.topicExists(topic) {
			c.reply(req, newResponse(req, resTopicNotExist, "No topic route info in name server for the topic: "+topic))
			return
		}
		qd, bd := s.route(topic)
		body, _ := json.Marshal(routeData{QueueDatas: []routeQueueData{qd}, BrokerDatas: []routeBrokerData{bd}})
		resp := newResponse(req, resSuccess, "")
		resp.Body = body
		c.reply(req, resp)
	case reqGetBrokerClusterInfo:
		c.reply(req, clusterInfo(req, s))
	default:
		s.logUnknown("name server", req.Code, c.remoteAddr())
		c.reply(req, newResponse(req, resRequestCodeNotSupported, "request code not supported by rmqtest name server"))
	}
}

func (n *nameServer) closed(*conn, bool) {}

// route returns the broker's part of topic's route (creating the topic on first use): its
// queues, as master (broker id 0) with the broker's permission.
func (s *Server) route(topic string) (routeQueueData, routeBrokerData) {
	q := s.topic(topic)
	return routeQueueData{BrokerName: s.opts.BrokerName, ReadQueueNums: q, WriteQueueNums: q, Perm: int(s.perm.Load())},
		routeBrokerData{Cluster: s.opts.ClusterName, BrokerName: s.opts.BrokerName, BrokerAddrs: map[int64]string{0: s.brokerAddr}}
}

// clusterInfo answers GET_BROKER_CLUSTER_INFO with the running brokers among servers, in
// the shape Apache RocketMQ's name server writes with fastjson: the broker address map's
// number keys are not quoted, which is not JSON that encoding/json reads.
func clusterInfo(req *command, servers ...*Server) *command {
	var table, names []string
	cluster := ""
	for _, s := range servers {
		if !s.BrokerRunning() {
			continue
		}
		cluster = s.opts.ClusterName
		table = append(table, fmt.Sprintf(`%q:{"brokerAddrs":{0:%q},"brokerName":%q,"cluster":%q}`,
			s.opts.BrokerName, s.brokerAddr, s.opts.BrokerName, s.opts.ClusterName))
		names = append(names, fmt.Sprintf("%q", s.opts.BrokerName))
	}
	clusters := ""
	if len(names) > 0 {
		clusters = fmt.Sprintf(`%q:[%s]`, cluster, strings.Join(names, ","))
	}
	resp := newResponse(req, resSuccess, "")
	resp.Body = []byte(`{"brokerAddrTable":{` + strings.Join(table, ",") + `},"clusterAddrTable":{` + clusters + `}}`)
	return resp
}
