// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outbox-relay/outbox-relay/internal/remoting/frame"
)

// rawRequest sends one command on a fresh connection and reads the answer.
func rawRequest(t *testing.T, addr string, cmd *command) *command {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	frame, err := encodeCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	resp, err := readCommand(bufio.NewReader(nc))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestDecodeBatchMatchesClientEncoding(t *testing.T) {
	a := primitive.NewMessage("T", []byte("first"))
	a.WithTag("x")
	a.Flag = 7
	b := primitive.NewMessage("T", []byte{})
	b.WithProperty("k", "v")
	entries, err := decodeBatch(producer.MarshalMessageBatch(a, b))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || string(entries[0].body) != "first" || entries[0].flag != 7 ||
		parseProperties(entries[0].props)["TAGS"] != "x" || len(entries[1].body) != 0 || parseProperties(entries[1].props)["k"] != "v" {
		t.Fatalf("entries %+v", entries)
	}
	if _, err := decodeBatch([]byte{0, 0, 0, 99, 1}); err == nil {
		t.Fatal("truncated batch accepted")
	}
}

func TestStoredEncodingDecodesWithTheClient(t *testing.T) {
	r := &record{
		topic: "T", queueID: 2, queueOffset: 5, physOffset: 1234, flag: 3,
		body: []byte("hello"), props: formatProperties(map[string]string{"TAGS": "t", "UNIQ_KEY": "ABC"}),
		bornTimestamp: 111, storeTimestamp: 222, reconsumeTimes: 4,
		bornHost:  hostPort{ip: net.IPv4(10, 0, 0, 1).To4(), port: 5555},
		storeHost: hostPort{ip: net.ParseIP("::1"), port: 10911},
	}
	msgs := primitive.DecodeMessage(r.encode())
	if len(msgs) != 1 {
		t.Fatalf("decoded %d messages", len(msgs))
	}
	m := msgs[0]
	if m.Topic != "T" || m.Queue.QueueId != 2 || m.QueueOffset != 5 || m.CommitLogOffset != 1234 || m.Flag != 3 ||
		string(m.Body) != "hello" || m.GetTags() != "t" || m.MsgId != "ABC" || m.BornTimestamp != 111 ||
		m.StoreTimestamp != 222 || m.ReconsumeTimes != 4 || m.BornHost != "10.0.0.1:5555" || m.StoreSize != int32(len(r.encode())) {
		t.Fatalf("decoded %v", m)
	}
}

func TestSendMessageV2HeaderAndBinaryCodec(t *testing.T) {
	s := startServer(t, Options{})
	for i, ser := range []frame.Serialization{frame.JSON, frame.RocketMQ} {
		props := formatProperties(map[string]string{"TAGS": "v2", "KEYS": "k1 k2", "user": "ü"})
		resp := rawRequest(t, s.BrokerAddr(), &command{
			Code: reqSendMessageV2, Opaque: 1, Serialization: ser, Body: []byte{0, 1, 2},
			Ext: map[string]string{"a": "pg", "b": "V2Topic", "c": "TBW102", "d": "4", "e": "3", "f": "0",
				"g": "1700000000000", "h": "0", "i": props, "j": "0", "k": "false", "l": "16", "m": "false"},
		})
		if resp.Code != resSuccess || resp.Ext["queueId"] != "3" || resp.Ext["queueOffset"] != strconv.Itoa(i) || resp.Ext["msgId"] == "" {
			t.Fatalf("serialization %d: response %+v", ser, resp)
		}
	}
	got := s.QueueMessages("V2Topic", 3)
	if len(got) != 2 {
		t.Fatalf("stored %d", len(got))
	}
	for _, m := range got {
		if m.Tags != "v2" || len(m.Keys) != 2 || m.Properties["user"] != "ü" || !bytes.Equal(m.Body, []byte{0, 1, 2}) ||
			m.ProducerGroup != "pg" || m.BornTimestamp != 1700000000000 {
			t.Fatalf("stored %+v", m)
		}
	}
	// A queue the topic does not have is refused, as RocketMQ does.
	resp := rawRequest(t, s.BrokerAddr(), &command{Code: reqSendMessage, Opaque: 2, Body: []byte("x"),
		Ext: map[string]string{"producerGroup": "pg", "topic": "V2Topic", "queueId": "9", "properties": ""}})
	if resp.Code != resSystemError || s.Count("V2Topic") != 2 {
		t.Fatalf("queue 9: response %+v", resp)
	}
	// So is a body over the limit, with a code the client does not retry.
	resp = rawRequest(t, s.BrokerAddr(), &command{Code: reqSendMessage, Opaque: 3, Body: make([]byte, 4<<20+1),
		Ext: map[string]string{"producerGroup": "pg", "topic": "V2Topic", "queueId": "0"}})
	if resp.Code != resMessageIllegal || s.Count("V2Topic") != 2 {
		t.Fatalf("oversized body: response %+v", resp)
	}
}
