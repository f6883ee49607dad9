// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/remoting/frame"
)

// TestBinaryHeadersCheckBack: with BinaryHeaders the broker writes its answers and its
// check-back with binary headers whatever the serialization of the requests, as Apache
// RocketMQ 5.3.3 started with rocketmq.serialize.type=ROCKETMQ does; without, JSON.
func TestBinaryHeadersCheckBack(t *testing.T) {
	for _, binary := range []bool{false, true} {
		want := frame.JSON
		if binary {
			want = frame.RocketMQ
		}
		checkBackIn(t, Options{BinaryHeaders: binary, TransactionTimeout: time.Nanosecond}, want)
	}
}

func checkBackIn(t *testing.T, opts Options, want frame.Serialization) {
	s := startServer(t, opts)
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
	if beat.Code != resSuccess || beat.Serialization != want {
		t.Fatalf("heartbeat in JSON: answer %+v, want success in serialization %d", beat, want)
	}
	props := formatProperties(map[string]string{propTransaction: "true", "PGROUP": "pg"})
	sent := call(&command{Code: reqSendMessage, Opaque: 2, Serialization: frame.RocketMQ, Body: []byte("half"),
		Ext: map[string]string{"producerGroup": "pg", "topic": "T", "queueId": "0", "properties": props}})
	if sent.Code != resSuccess || sent.Serialization != want {
		t.Fatalf("half send in binary: answer %+v, want success in serialization %d", sent, want)
	}
	if n := s.TriggerCheck(); n != 1 {
		t.Fatalf("%d checks sent, want 1", n)
	}
	chk, err := readCommand(r)
	if err != nil {
		t.Fatal(err)
	}
	if chk.Code != reqCheckTransactionState || chk.Serialization != want || !chk.IsOneway() || chk.Ext["commitLogOffset"] == "" {
		t.Fatalf("check-back %+v, want a oneway CHECK_TRANSACTION_STATE in serialization %d", chk, want)
	}
}
