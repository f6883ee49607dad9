// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/tlsbridge"
)

// rocketMQLink is how this process reaches RocketMQ: the name servers to give
// rocketmq-client-go (the configured ones, or the verifying bridge's), whether the client
// uses its own unverified TLS, and close, which stops the bridge. upstream, set with the
// bridge, turns one of its loopback addresses into the server's address it forwards to.
type rocketMQLink struct {
	nameServers []string
	clientTLS   bool
	close       func()
	upstream    func(local string) (string, bool)
}

// openRocketMQ starts the verifying bridge when rocketmq.tls verifies the server
// (docs/configuration.md, TLS to RocketMQ), after checking that the name servers'
// certificates pass: a refused certificate is an error, a name server that does not answer
// is not (the client retries it).
func openRocketMQ(ctx context.Context, mq config.RocketMQ, log zerolog.Logger) (rocketMQLink, error) {
	link := rocketMQLink{nameServers: mq.NameServers, clientTLS: mq.TLS.Enable, close: func() {}}
	if !mq.TLS.Verified() {
		return link, nil
	}
	for _, ns := range mq.NameServers {
		if strings.Contains(ns, "://") {
			return link, fmt.Errorf("%s: verified TLS needs host:port name servers, not a discovery URL (%s)", config.KeyRocketMQNameServers, ns)
		}
	}
	tc, err := mq.TLS.ClientConfig()
	if err != nil {
		return link, err
	}
	b, err := tlsbridge.Start(tlsbridge.Config{TLS: tc, Log: log}, mq.NameServers)
	if err != nil {
		return link, fmt.Errorf("%s: %w", config.KeyRocketMQTLSEnable, err)
	}
	if err := b.Verify(ctx); err != nil {
		b.Close()
		return link, fmt.Errorf("rocketmq.tls: the name server's certificate is refused: %w", err)
	}
	log.Info().Strs("nameservers", mq.NameServers).Str("server_name", tc.ServerName).
		Msg("TLS to RocketMQ verifies the servers' certificates (through the relay's loopback bridge)")
	return rocketMQLink{nameServers: b.NameServers(), close: b.Close, upstream: b.Upstream}, nil
}
