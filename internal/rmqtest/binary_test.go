// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/remoting/frame"
)

// TestBinaryHeadersCheckBack: with BinaryHeaders the broker's check-back goes out with
// binary headers, while its answers mirror the serialization of each request.
func TestBinaryHeadersCheckBack(t *testing.T) {
	s := startServer(t, Options{BinaryHeaders: true, TransactionTimeout: time.Nanosecond})
	nc, err := net.DialTimeout("tcp", s.BrokerAddr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(nc)
	call := func(c *command) *command {
		t.Helper()
		b, err := encodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
		resp, err := readCommand(r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	beat := call(&command{Code: reqHeartBeat, Opaque: 1, Serialization: frame.JSON,
		Body: []byte(`{"clientID":"raw","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[]}`)})
	if beat.Code != resSuccess || beat.Serialization != frame.JSON {
		t.Fatalf("heartbeat answer %+v, want success in JSON", beat)
	}
	props := formatProperties(map[string]string{propTransaction: "true", "PGROUP": "pg"})
	sent := call(&command{Code: reqSendMessage, Opaque: 2, Serialization: frame.RocketMQ, Body: []byte("half"),
		Ext: map[string]string{"producerGroup": "pg", "topic": "T", "queueId": "0", "properties": props}})
	if sent.Code != resSuccess || sent.Serialization != frame.RocketMQ {
		t.Fatalf("half send answer %+v, want success in binary", sent)
	}
	if n := s.TriggerCheck(); n != 1 {
		t.Fatalf("%d checks sent, want 1", n)
	}
	chk, err := readCommand(r)
	if err != nil {
		t.Fatal(err)
	}
	if chk.Code != reqCheckTransactionState || chk.Serialization != frame.RocketMQ || !chk.IsOneway() || chk.Ext["commitLogOffset"] == "" {
		t.Fatalf("check-back %+v, want a oneway CHECK_TRANSACTION_STATE in binary headers", chk)
	}
}
