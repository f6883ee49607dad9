// SPDX-License-Identifier: Apache-2.0

package tlsbridge_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testcerts"
	"github.com/outbox-relay/outbox-relay/internal/tlsbridge"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv("TLSBRIDGE_ATTACK"); addr != "" {
		os.Exit(attack(addr))
	}
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

const serverName = "rocketmq.test"

// tlsBroker starts the test broker serving TLS with a certificate of ca for names.
func tlsBroker(t testing.TB, ca *testcerts.CA, names ...string) *rmqtest.Server {
	t.Helper()
	srv, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {},
		TLS: &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, names...)}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// bridge starts a bridge to the broker's name server under cfg.
func bridge(t testing.TB, cfg *tls.Config, srv *rmqtest.Server) *tlsbridge.Bridge {
	t.Helper()
	b, err := tlsbridge.Start(tlsbridge.Config{TLS: cfg, DialTimeout: 2 * time.Second, Log: zerolog.New(zerolog.NewTestWriter(t))}, []string{srv.NameServerAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// send publishes one message with the relay's publisher to the name servers ns (with the
// client's own unverified TLS when insecure), and returns the send's error.
func send(t testing.TB, ns []string, insecure bool, msgID string) error {
	t.Helper()
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: ns, TLS: insecure, SendTimeout: 2 * time.Second, Connections: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return pub.Send(ctx, relay.Route{}, &relay.Message{MsgID: msgID, Topic: "TlsOrders", Body: []byte("order " + msgID)})
}

// stored counts the broker's messages of TlsOrders carrying msgID.
func stored(srv *rmqtest.Server, msgID string) int {
	n := 0
	for _, m := range srv.Messages("TlsOrders") {
		if m.Properties[outbox.MsgIDProperty] == msgID {
			n++
		}
	}
	return n
}

// A server whose certificate is not signed by the configured CA, or not for the configured
// name, is refused: Verify names the failure, the send fails and the broker stores nothing.
// The right CA and name deliver, through the bridge, and the client's own unverified TLS
// still works when chosen.
func TestBridgeVerifiesTheServer(t *testing.T) {
	ca, other := testcerts.NewCA(t, "right"), testcerts.NewCA(t, "other")
	srv := tlsBroker(t, ca, serverName)
	cases := []struct {
		name string
		cfg  *tls.Config
		ok   bool
	}{
		{"wrong CA", &tls.Config{RootCAs: other.Pool(), ServerName: serverName}, false},
		{"wrong name", &tls.Config{RootCAs: ca.Pool(), ServerName: "other.test"}, false},
		{"no name (the address's host, 127.0.0.1, is not in the certificate)", &tls.Config{RootCAs: ca.Pool()}, false},
		{"right CA and name", &tls.Config{RootCAs: ca.Pool(), ServerName: serverName}, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := bridge(t, c.cfg, srv)
			msgID := fmt.Sprintf("tls-%d", i)
			verr, serr := b.Verify(context.Background()), send(t, b.NameServers(), false, msgID)
			var ve *tls.CertificateVerificationError
			switch {
			case c.ok && (verr != nil || serr != nil):
				t.Fatalf("Verify = %v, Send = %v; want both nil", verr, serr)
			case !c.ok && !errors.As(verr, &ve):
				t.Fatalf("Verify = %v; want a certificate verification error", verr)
			case !c.ok && serr == nil:
				t.Fatal("Send succeeded through a server that failed verification")
			}
			want := 0
			if c.ok {
				want = 1
			}
			if n := stored(srv, msgID); n != want {
				t.Fatalf("the broker stored %d copies, want %d", n, want)
			}
		})
	}
	t.Run("insecure_skip_verify chosen explicitly", func(t *testing.T) {
		if err := send(t, []string{srv.NameServerAddr()}, true, "tls-insecure"); err != nil {
			t.Fatal(err)
		}
		if n := stored(srv, "tls-insecure"); n != 1 {
			t.Fatalf("the broker stored %d copies, want 1", n)
		}
	})
}

// The bridge's loopback listeners, the name server's and a broker's, refuse a connection of
// another process: it gets no answer, and the refusal is counted. The client of this process
// is served on the same listeners.
func TestBridgeRefusesOtherProcesses(t *testing.T) {
	ca := testcerts.NewCA(t, "right")
	srv := tlsBroker(t, ca, serverName)
	b := bridge(t, &tls.Config{RootCAs: ca.Pool(), ServerName: serverName}, srv)
	if err := send(t, b.NameServers(), false, "own"); err != nil {
		t.Fatalf("this process's client: %v", err)
	}
	masters, err := remoting.Masters(context.Background(), b.NameServers()[0])
	if err != nil || len(masters) != 1 {
		t.Fatalf("Masters through the bridge = %v, %v", masters, err)
	}
	local := masters["broker-a"]
	if up, ok := b.Upstream(local); !ok || up != srv.BrokerAddr() {
		t.Fatalf("the broker's address %s forwards to %q, want %s", local, up, srv.BrokerAddr())
	}
	for i, addr := range []string{b.NameServers()[0], local} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TLSBRIDGE_ATTACK="+addr)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "refused") {
			t.Fatalf("another process dialling %s: %s (%v); want it refused", addr, out, err)
		}
		if n := b.Refused(); n != int64(i+1) {
			t.Fatalf("refused %d connections, want %d", n, i+1)
		}
	}
}

// attack runs in a child process: it dials addr, asks for the broker table and prints
// whether it got an answer.
func attack(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	defer c.Close()
	h := `{"code":106,"language":"GO","version":399,"opaque":7,"flag":0}`
	frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(h)))
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(h)))
	if _, err := c.Write(append(frame, h...)); err != nil {
		fmt.Println("refused: write:", err)
		return 0
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, err := bufio.NewReader(c).Read(make([]byte, 64))
	if n > 0 {
		fmt.Println("answered with", n, "bytes")
		return 0
	}
	fmt.Println("refused:", err)
	return 0
}

// Connections beyond MaxConns are closed at once; the open one is served.
func TestBridgeBoundsConnections(t *testing.T) {
	ca := testcerts.NewCA(t, "right")
	srv := tlsBroker(t, ca, serverName)
	b, err := tlsbridge.Start(tlsbridge.Config{TLS: &tls.Config{RootCAs: ca.Pool(), ServerName: serverName}, MaxConns: 1}, []string{srv.NameServerAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	first, err := net.Dial("tcp", b.NameServers()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := net.Dial("tcp", b.NameServers()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := second.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection over MaxConns: read %d, %v; want it closed", n, err)
	}
	h := `{"code":106,"language":"GO","version":399,"opaque":9,"flag":0}`
	req := binary.BigEndian.AppendUint32(nil, uint32(4+len(h)))
	req = binary.BigEndian.AppendUint32(req, uint32(len(h)))
	if _, err := first.Write(append(req, h...)); err != nil {
		t.Fatal(err)
	}
	_ = first.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := first.Read(make([]byte, 64)); n == 0 {
		t.Fatalf("the connection within MaxConns got no answer: %v", err)
	}
}
