// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/dashboard"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// bodyCase is one request to the dashboard and what it must answer.
type bodyCase struct {
	name, path, host, token string
	code                    int
	shown                   bool
}

// TestBodiesNeedATokenOffLoopback: with http.addr on every interface or any other
// non-loopback address, the dashboard's dead list and message API serve bodies only with the
// read or the admin token, and never to a foreign Host (DNS rebinding); with http.addr on
// loopback they are served without a token. The dashboard is the one the relay builds
// (dashboardConfig) from each http.addr, served on a loopback test listener: the rule judges
// the configured address, so no test server has to listen off loopback. The binary's wiring
// on loopback is internal/e2e TestReadingBodiesIsAPermission.
func TestBodiesNeedATokenOffLoopback(t *testing.T) {
	db := testenv.MySQL(t)
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	const secret = `{"email":"alice@example.com","card":"4111 1111 1111 1111"}`
	res, err := db.ExecContext(ctx, "INSERT INTO local_message (msg_id, topic, content, status, fail_reason) VALUES ('dead-1', 'payments', ?, 3, 'test')", secret)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.LastInsertId()
	msg := "/ui/api/message?table=local_message&id=" + strconv.FormatInt(id, 10)
	dead := "/ui/api/dead?table=local_message"
	const readToken, adminToken = "read-token-0123456789", "admin-token-0123456789"
	src := []dashboard.Source{{Name: "default", DB: db.DB, Tables: []string{"local_message"},
		LockKey: func(table string) string { return prefix + table }}}
	for _, addr := range []string{":9464", "0.0.0.0:9464", "[::]:9464", "10.20.30.40:9464", "relay.shop.svc:9464"} {
		open := serveDashboard(t, rdb, src, config.HTTP{Addr: addr})
		checkBodies(t, "http.addr "+addr+", no token configured", open, []bodyCase{
			{"message", msg, "", "", 403, false},
			{"dead list", dead, "", "", 403, false},
		})
		if code, body := fetch(t, open, "/ui/api/overview", "", ""); code != 200 || !strings.Contains(body, `"read_locked":true`) {
			t.Errorf("http.addr %s: overview %d %.300s; want 200 and read_locked", addr, code, body)
		}
		guarded := serveDashboard(t, rdb, src, config.HTTP{Addr: addr, ReadToken: readToken, AdminToken: adminToken, Hosts: []string{"relay.internal"}})
		checkBodies(t, "http.addr "+addr+" with tokens", guarded, []bodyCase{
			{"none sent", msg, "", "", 401, false},
			{"wrong one sent", dead, "", "not-the-token-at-all", 401, false},
			{"read token", msg, "", readToken, 200, true},
			{"admin token reads too", dead, "", adminToken, 200, true},
			{"configured host name", msg, "relay.internal:9464", readToken, 200, true},
			{"foreign host (DNS rebinding)", msg, "attacker.example:9464", readToken, 421, false},
		})
	}
	for _, addr := range []string{"127.0.0.1:9464", "[::1]:9464", "localhost:9464"} {
		checkBodies(t, "http.addr "+addr, serveDashboard(t, rdb, src, config.HTTP{Addr: addr}), []bodyCase{
			{"no token needed", msg, "", "", 200, true},
			{"foreign host (DNS rebinding)", msg, "attacker.example", "", 421, false},
			{"rebinding to the page", "/ui/", "attacker.example", "", 421, false},
		})
	}
}

// serveDashboard serves the dashboard the relay builds for hc on a loopback test server.
func serveDashboard(t *testing.T, rdb redis.Cmdable, src []dashboard.Source, hc config.HTTP) *httptest.Server {
	t.Helper()
	cfg := config.Default()
	cfg.HTTP = hc
	log := zerolog.Nop()
	ui, err := dashboard.New(rdb, dashboardConfig(cfg, src, &log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := ui.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	srv := httptest.NewServer(ui)
	t.Cleanup(func() { srv.Close(); ui.Stop(); cancel() })
	return srv
}

// checkBodies sends each case's request and checks its status and whether the dead row's
// body (or its msg_id) is in the answer.
func checkBodies(t *testing.T, what string, srv *httptest.Server, cases []bodyCase) {
	t.Helper()
	for _, c := range cases {
		code, body := fetch(t, srv, c.path, c.host, c.token)
		shown := strings.Contains(body, "4111 1111") || strings.Contains(body, `"msg_id":"dead-`)
		if code != c.code || shown != c.shown {
			t.Errorf("%s, %s: %d, message shown %v; want %d, shown %v (%.200s)", what, c.name, code, shown, c.code, c.shown, body)
		}
	}
}

// fetch GETs path from srv with the Host header host (empty: the address) and the bearer
// token (empty: none).
func fetch(t *testing.T, srv *httptest.Server, path, host, token string) (int, string) {
	t.Helper()
	return testenv.GetAs(t, srv.URL+path, host, token)
}
