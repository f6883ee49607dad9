// SPDX-License-Identifier: Apache-2.0

// Command rmqtest-broker runs the in-process test RocketMQ name server and broker of
// package rmqtest as a process of its own, for the demo and for manual runs. It keeps
// everything in memory and forgets it on exit: never use it in production.
//
//	rmqtest-broker -namesrv-addr 127.0.0.1:9876 -broker-addr 127.0.0.1:10911 -queues 4
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
)

func main() {
	nameAddr := flag.String("namesrv-addr", "127.0.0.1:9876", "name server listen address (clients' name server setting)")
	brokerAddr := flag.String("broker-addr", "127.0.0.1:10911", "broker listen address (port 0: chosen by the OS)")
	queues := flag.Int("queues", 4, "queues of each auto-created topic")
	flag.Parse()

	s, err := rmqtest.Start(rmqtest.Options{
		NameServerAddr: *nameAddr,
		BrokerAddr:     *brokerAddr,
		Queues:         *queues,
	})
	if err != nil {
		log.Fatalf("rmqtest-broker: %v", err)
	}
	fmt.Printf("rmqtest-broker: name server %s, broker %s, %d queues per topic (in memory, for tests and demos only)\n",
		s.NameServerAddr(), s.BrokerAddr(), *queues)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	s.Close()
	fmt.Println("rmqtest-broker: stopped")
}
