// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/message"
)

// TestPublishersShareTheClientTLS: two publishers with the same TLS setting, created and
// sending at the same time, each deliver their message (and, under -race, never write the
// client's process-wide remoting settings while the other dials). A publisher asking for the
// other TLS setting while they are open is refused with an error saying the client keeps
// one per process.
func TestPublishersShareTheClientTLS(t *testing.T) {
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	ns := []string{broker.NameServerAddr()}
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		pub, err := NewPublisher(Config{NameServers: ns, SendTimeout: 5 * time.Second, Connections: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pub.Close() })
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs <- pub.Send(ctx, message.Route{}, &message.Message{MsgID: fmt.Sprint("shared-tls-", i), Topic: "SharedTls", Body: []byte("x")})
		}()
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	for i := 0; i < 2; i++ {
		id := fmt.Sprint("shared-tls-", i)
		n := 0
		for _, m := range broker.Messages("SharedTls") {
			if m.Properties[outbox.MsgIDProperty] == id {
				n++
			}
		}
		if n != 1 {
			t.Errorf("message %s stored %d times, want 1", id, n)
		}
	}
	pub, err := NewPublisher(Config{NameServers: ns, TLS: true})
	if err == nil {
		_ = pub.Close()
		t.Fatal("a TLS publisher was created while plain publishers are open in the process")
	}
	if msg := err.Error(); !strings.Contains(msg, "TLS true refused") || !strings.Contains(msg, "one TLS setting per process") {
		t.Fatalf("refusal = %q; want it to name the TLS setting and the one-per-process limit", msg)
	}
}

// TestClientTLSClaims: claims of one value share the switch, which is written only when it
// differs from what the client holds, and only by a build running alone; the other value is
// refused until every claim is released, and then written once.
func TestClientTLSClaims(t *testing.T) {
	var reg tlsRegistry
	var writes []bool
	build := func(c *TLSClaim) {
		t.Helper()
		if err := c.Build(func(writeTLS bool) error {
			if writeTLS {
				writes = append(writes, c.TLS())
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := reg.claim(false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := reg.claim(false)
	if err != nil {
		t.Fatal(err)
	}
	build(a)
	build(b)
	if len(writes) != 0 {
		t.Fatalf("plain clients wrote the client's default: %v", writes)
	}
	if _, err := reg.claim(true); err == nil {
		t.Fatal("TLS claimed while plain claims are open")
	}
	a.Release()
	a.Release() // twice: no effect
	if _, err := reg.claim(true); err == nil {
		t.Fatal("TLS claimed while one plain claim is open")
	}
	b.Release()
	c, err := reg.claim(true)
	if err != nil {
		t.Fatalf("TLS after every plain claim was released: %v", err)
	}
	build(c)
	build(c)
	c.Release()
	d, err := reg.claim(false)
	if err != nil {
		t.Fatal(err)
	}
	build(d)
	if want := []bool{true, false}; !slices.Equal(writes, want) {
		t.Fatalf("writes = %v, want %v (once on, once back off)", writes, want)
	}
	if err := d.Build(func(bool) error { return errors.New("boom") }); err == nil {
		t.Fatal("a failed build reported no error")
	}
}
