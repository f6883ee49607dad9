// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/outbox-relay/outbox-relay/internal/remoting/frame"
)

// ClusterOptions configures a Cluster. The zero value is usable: two brokers behind one
// name server.
type ClusterOptions struct {
	// Brokers is the number of master brokers. Defaults to 2. They are named broker-a,
	// broker-b, ... and each has its own store, address and faults.
	Brokers int
	// NameServers is the number of name servers, each announcing every broker. Defaults to 1.
	NameServers int
	// Broker is the template of every broker's Options; BrokerName, BrokerAddr and
	// NameServerAddr are set per broker.
	Broker Options
}

// Cluster is several brokers of one RocketMQ cluster behind one or more name servers: a
// topic's route lists the queues of every broker on which the topic exists. Like
// RocketMQ's name server (measured: it keeps a killed broker's route until its 120 s
// expiry), the route keeps announcing a stopped broker. All methods are safe for
// concurrent use.
type Cluster struct {
	brokers []*Server

	mu       sync.Mutex
	nsAddrs  []string
	nameSrvs []*listener // nil while stopped
	closed   bool
}

// StartCluster starts the brokers and the name servers on loopback.
func StartCluster(opts ClusterOptions) (*Cluster, error) {
	if opts.Brokers <= 0 {
		opts.Brokers = 2
	}
	if opts.NameServers <= 0 {
		opts.NameServers = 1
	}
	c := &Cluster{}
	for i := range opts.Brokers {
		o := opts.Broker
		o.BrokerName = fmt.Sprintf("broker-%c", 'a'+i)
		o.BrokerAddr, o.NameServerAddr = "", ""
		s, err := Start(o)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("rmqtest: cluster broker %d: %w", i, err)
		}
		c.brokers = append(c.brokers, s)
	}
	for i := range opts.NameServers {
		ln, err := listen("127.0.0.1:0", &clusterNameServer{c: c}, nil, frame.JSON)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("rmqtest: cluster name server %d: %w", i, err)
		}
		c.nameSrvs = append(c.nameSrvs, ln)
		c.nsAddrs = append(c.nsAddrs, ln.addr())
	}
	return c, nil
}

// NameServerAddrs returns the name servers' host:port, what clients are configured with.
func (c *Cluster) NameServerAddrs() []string { return append([]string(nil), c.nsAddrs...) }

// Broker returns the i-th broker (0 is broker-a); stop, fault or inspect it as a Server.
func (c *Cluster) Broker(i int) *Server { return c.brokers[i] }

// Brokers returns the number of brokers.
func (c *Cluster) Brokers() int { return len(c.brokers) }

// StopNameServer closes the i-th name server and drops its connections.
func (c *Cluster) StopNameServer(i int) {
	c.mu.Lock()
	ln := c.nameSrvs[i]
	c.nameSrvs[i] = nil
	c.mu.Unlock()
	if ln != nil {
		ln.close()
	}
}

// StartNameServer brings the i-th name server back on its address.
func (c *Cluster) StartNameServer(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("rmqtest: cluster closed")
	}
	if c.nameSrvs[i] != nil {
		return nil
	}
	ln, err := listen(c.nsAddrs[i], &clusterNameServer{c: c}, nil, frame.JSON)
	if err != nil {
		return fmt.Errorf("rmqtest: name server listen again on %s: %w", c.nsAddrs[i], err)
	}
	c.nameSrvs[i] = ln
	return nil
}

// CreateTopic creates topic with n queues on every broker, as updateTopic -c does.
func (c *Cluster) CreateTopic(topic string, n int) {
	for _, s := range c.brokers {
		s.CreateTopic(topic, n)
	}
}

// Messages returns the messages of topic stored on every broker, broker by broker, each in
// store order; Message.BrokerName tells where it is.
func (c *Cluster) Messages(topic string) []Message {
	var out []Message
	for _, s := range c.brokers {
		out = append(out, s.Messages(topic)...)
	}
	return out
}

// Count returns the number of messages of topic stored on every broker.
func (c *Cluster) Count(topic string) int {
	n := 0
	for _, s := range c.brokers {
		n += s.Count(topic)
	}
	return n
}

// Close stops the name servers and the brokers. It is safe to call twice.
func (c *Cluster) Close() {
	c.mu.Lock()
	c.closed = true
	lns := c.nameSrvs
	c.nameSrvs = make([]*listener, len(lns))
	c.mu.Unlock()
	for _, ln := range lns {
		if ln != nil {
			ln.close()
		}
	}
	for _, s := range c.brokers {
		s.Close()
	}
}

// clusterNameServer answers route queries with the queues of every broker holding the topic.
type clusterNameServer struct{ c *Cluster }

func (n *clusterNameServer) serve(cn *conn, req *command) {
	if req.Code == reqGetBrokerClusterInfo {
		cn.reply(req, clusterInfo(req, n.c.brokers...))
		return
	}
	if req.Code != reqGetRouteInfoByTopic {
		n.c.brokers[0].logUnknown("name server", req.Code, cn.remoteAddr())
		cn.reply(req, newResponse(req, resRequestCodeNotSupported, "request code not supported by rmqtest name server"))
		return
	}
	topic := req.Ext["topic"]
	var rd routeData
	if checkTopic(topic) == "" {
		for _, s := range n.c.brokers {
			if !s.topicExists(topic) {
				continue
			}
			qd, bd := s.route(topic)
			rd.QueueDatas = append(rd.QueueDatas, qd)
			rd.BrokerDatas = append(rd.BrokerDatas, bd)
		}
	}
	if len(rd.QueueDatas) == 0 {
		cn.reply(req, newResponse(req, resTopicNotExist, "No topic route info in name server for the topic: "+topic))
		return
	}
	body, _ := json.Marshal(rd)
	resp := newResponse(req, resSuccess, "")
	resp.Body = body
	cn.reply(req, resp)
}

func (n *clusterNameServer) closed(*conn, bool) {}
