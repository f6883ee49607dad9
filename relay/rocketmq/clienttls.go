// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"fmt"
	"sync"
)

// rocketmq-client-go keeps its remoting settings (TLS on or off, connect/read/write timeouts)
// in one package-level value shared by every producer, consumer and admin client of the
// process: producer.WithTls and admin.WithTls write it, and every connection reads it when
// it dials. Writing it while another client dials is a data race, and two clients wanting
// different values silently change each other's. clientTLS therefore owns the TLS switch for
// every client this module builds: the first holder decides the value, the value is written
// only when it differs from what the global holds (never in a process that stays on the
// client's default, off), and a client asking for the other value while any holder is open
// is refused. The timeouts are never
// written: the client's defaults apply.
var clientTLS tlsRegistry

// tlsRegistry is the process-wide owner of the client's TLS switch.
type tlsRegistry struct {
	mu      sync.Mutex
	holders int  // open claims
	tls     bool // the value of the open claims
	global  bool // the value the client's global holds (its default is off)
}

// TLSClaim is a hold on rocketmq-client-go's process-wide TLS switch, taken by ClaimClientTLS
// and given back by Release.
type TLSClaim struct {
	reg      *tlsRegistry
	tls      bool
	released sync.Once
}

// ClaimClientTLS holds rocketmq-client-go's process-wide TLS switch at tls until Release. It
// fails while another claim with the other value is open: the client keeps one TLS setting
// per process, for every producer and admin client in it.
func ClaimClientTLS(tls bool) (*TLSClaim, error) {
	return clientTLS.claim(tls)
}

func (r *tlsRegistry) claim(tls bool) (*TLSClaim, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holders > 0 && r.tls != tls {
		return nil, fmt.Errorf("relay: RocketMQ TLS %v refused: rocketmq-client-go keeps one TLS setting per process, "+
			"and %d open client(s) of this process use TLS %v", tls, r.holders, r.tls)
	}
	r.tls = tls
	r.holders++
	return &TLSClaim{reg: r, tls: tls}, nil
}

// TLS is the value the claim holds.
func (c *TLSClaim) TLS() bool { return c.tls }

// Build calls build, which creates one rocketmq-client-go producer or admin client. writeTLS
// tells build to add the client's WithTls(c.TLS()) option: it is true only while the
// client's global holds the other value, and then build runs alone, so that no other client
// of ours is created while the global is written. A build told false leaves WithTls out: the
// switch already holds the claim's value, and writing it again would race with dials.
func (c *TLSClaim) Build(build func(writeTLS bool) error) error {
	r := c.reg
	r.mu.Lock()
	if r.global == c.tls {
		r.mu.Unlock()
		return build(false)
	}
	defer r.mu.Unlock()
	// Written or not, the option was applied when build fails after creating the client.
	r.global = c.tls
	return build(true)
}

// Release gives the claim back; once no claim is open, the next may choose the other value.
// Call it after the clients built under the claim are shut down. Calling it again does
// nothing.
func (c *TLSClaim) Release() {
	c.released.Do(func() {
		r := c.reg
		r.mu.Lock()
		defer r.mu.Unlock()
		r.holders--
	})
}
