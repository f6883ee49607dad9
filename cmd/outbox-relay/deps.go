package main

// Temporary: pins the chosen dependencies until the packages that use them land.
import (
	_ "github.com/apache/rocketmq-client-go/v2"
	_ "github.com/go-redsync/redsync/v4"
	_ "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/rs/zerolog"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
)

func main() {}
