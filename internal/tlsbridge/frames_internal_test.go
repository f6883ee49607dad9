// SPDX-License-Identifier: Apache-2.0

package tlsbridge

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A route in fastjson's shape (unquoted number keys) has the brokers' addresses, masters and
// slaves, replaced by the bridge's, and nothing else changed; a broker table too.
func TestRewriteBrokers(t *testing.T) {
	local := func(up string) (string, error) { return "127.0.0.1:1" + up[len(up)-4:], nil }
	route := `{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"b-a","cluster":"c"}],` +
		`"filterServerTable":{},"queueDatas":[{"brokerName":"b-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}],"note":"10.0.0.9:10911"}`
	got, err := rewriteBrokers([]byte(route), local)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer(`"10.0.0.1:10911"`, `"127.0.0.1:10911"`, `"10.0.0.2:10911"`, `"127.0.0.1:10911"`).Replace(route)
	if string(got) != want {
		t.Fatalf("rewritten route\n%s\nwant\n%s", got, want)
	}
	table := `{"brokerAddrTable":{"b-a":{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"b-a","cluster":"c"}},"clusterAddrTable":{"c":["b-a"]}}`
	got, err = rewriteBrokers([]byte(table), local)
	if err != nil || !bytes.Contains(got, []byte(`{0:"127.0.0.1:10911"}`)) {
		t.Fatalf("rewritten broker table %s, %v", got, err)
	}
	if _, err := rewriteBrokers([]byte(`{"brokerDatas":[`), local); err == nil {
		t.Fatal("a truncated route was passed on")
	}
	full := func(string) (string, error) { return "", errors.New("more than 1 brokers") }
	if _, err := rewriteBrokers([]byte(route), full); err == nil {
		t.Fatal("a route naming more brokers than allowed was passed on")
	}
}

// frame builds a remoting frame with a JSON header and body.
func frame(header string, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)+len(body)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(header)))
	return append(append(b, header...), body...)
}

// A route answer is rewritten with its frame length recomputed; answers to other requests
// pass as they are; a header over the bound, and a route answer over MaxFrame, end the
// connection instead of being read.
func TestFramerBounds(t *testing.T) {
	local := func(string) (string, error) { return "127.0.0.1:7", nil }
	f := newFramer(1024, local)
	var up bytes.Buffer
	req := frame(`{"code":105,"opaque":5,"flag":0}`, nil)
	other := frame(`{"code":34,"opaque":6,"flag":0}`, []byte("hb"))
	if err := f.requests(bytes.NewReader(append(req, other...)), &up); err == nil || !bytes.Equal(up.Bytes(), append(req, other...)) {
		t.Fatalf("requests passed %q, %v; want them as they are, then EOF", up.Bytes(), err)
	}
	body := []byte(`{"brokerDatas":[{"brokerAddrs":{0:"10.1.1.1:10911"}}]}`)
	var client bytes.Buffer
	answers := append(frame(`{"code":0,"opaque":6,"flag":1}`, []byte("ok")), frame(`{"code":0,"opaque":5,"flag":1}`, body)...)
	_ = f.responses(bytes.NewReader(answers), &client)
	want := append(frame(`{"code":0,"opaque":6,"flag":1}`, []byte("ok")), frame(`{"code":0,"opaque":5,"flag":1}`, []byte(`{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:7"}}]}`))...)
	if !bytes.Equal(client.Bytes(), want) {
		t.Fatalf("answers\n%q\nwant\n%q", client.Bytes(), want)
	}

	huge := binary.BigEndian.AppendUint32(nil, 1<<30)
	huge = binary.BigEndian.AppendUint32(huge, maxHeader+1)
	if err := f.requests(bytes.NewReader(huge), &up); !errors.Is(err, errFrame) {
		t.Fatalf("a header over %d bytes: %v", maxHeader, err)
	}
	_ = f.requests(bytes.NewReader(req), &bytes.Buffer{})
	big := frame(`{"code":0,"opaque":5,"flag":1}`, []byte(fmt.Sprintf(`{"x":"%s"}`, strings.Repeat("a", 2048))))
	client.Reset()
	if err := f.responses(bytes.NewReader(big), &client); !errors.Is(err, errFrame) || client.Len() != 0 {
		t.Fatalf("a route answer over MaxFrame: %v, %d bytes passed", err, client.Len())
	}
}
