package main

// Temporary: keeps `go mod tidy` from dropping these requirements until the relay package
// that uses them has landed. Delete this file once relay/ imports them.
import (
	_ "github.com/apache/rocketmq-client-go/v2"
	_ "github.com/go-redsync/redsync/v4"
	_ "github.com/go-redsync/redsync/v4/redis/goredis/v9"
)
