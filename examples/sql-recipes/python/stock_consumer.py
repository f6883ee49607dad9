# SPDX-License-Identifier: Apache-2.0
"""Applies each outbox event exactly once from Python: a RocketMQ push consumer whose effect and
dedupe row commit in one PyMySQL transaction, in the same dedupe table and with the same
identity as the Go idempotency.SQLGuard (docs/sql-recipes.md shows the part between the recipe
markers). The test in internal/brokersuite runs it against Apache RocketMQ beside the Java and
Go consumers of the same group.

Run: python3 stock_consumer.py   (settings from RECIPE_* environment variables)
"""
import os
import signal
import threading

import pymysql
from rocketmq.client import PushConsumer, RecvMessage
from rocketmq.exceptions import ffi_check
from rocketmq.ffi import dll

# recipe:start
import hashlib


def text(v):
    """The client gives bytes (keys, tags, properties) or None; identities are text."""
    return v.decode() if isinstance(v, bytes) else (v or "")


def identity(msg):
    """The event's identity, as outbox-relay's Go consumers compute it: "topic:tag:keys"."""
    keys = " ".join(text(msg.keys).split())
    if not keys:
        raise ValueError("message %s has no keys" % text(msg.id))
    topic = text(msg.topic)
    if topic.startswith("%RETRY%"):  # a redelivery: its original topic is a property
        topic = text(msg.get_property("RETRY_TOPIC")) or topic
    tag = text(msg.tags).replace("\\", "\\\\").replace(":", "\\:")  # no tag: empty
    ident = "%s:%s:%s" % (topic, tag, keys)
    if len(ident.encode()) <= 255:
        return ident
    return "h:" + hashlib.sha256(ident.encode()).hexdigest()  # longer ones are hashed


def apply_once(conn, group, msg, effect):
    """Applies effect(cursor) once per event and consumer group; False when it was applied
    before. Raises to have the broker redeliver."""
    try:
        with conn.cursor() as cur:  # a transaction: the dedupe row and the effect commit together
            try:
                cur.execute("INSERT INTO stock_dedupe (consumer_group, dedupe_key) VALUES (%s, %s)",
                            (group.encode(), identity(msg).encode()))
            except pymysql.err.IntegrityError as e:
                if e.args[0] != 1062:  # ER_DUP_ENTRY: applied before, skip it
                    raise
                conn.rollback()
                return False
            effect(cur)
        conn.commit()
        return True
    except Exception:
        conn.rollback()
        raise
# recipe:end


CONSUME_SUCCESS, RECONSUME_LATER = 0, 1


def main():
    env = os.environ
    group = env["RECIPE_GROUP"]
    conn = pymysql.connect(host=env["RECIPE_MYSQL_HOST"], port=int(env["RECIPE_MYSQL_PORT"]),
                           user=env["RECIPE_MYSQL_USER"], password=env["RECIPE_MYSQL_PASSWORD"],
                           database=env["RECIPE_MYSQL_DATABASE"], charset="utf8mb4", autocommit=False)
    lock = threading.Lock()  # one connection: one message at a time

    def on_message(_consumer, handle):
        # Registered directly: PushConsumer.subscribe of rocketmq 0.4.4 turns an exception
        # raised by the callback into CONSUME_SUCCESS (the C callback returns 0), which would
        # drop a message whose effect failed. This callback never raises.
        msg = RecvMessage(handle)
        try:
            ident = identity(msg)
            with lock:
                applied = apply_once(conn, group, msg, lambda cur: cur.execute(
                    "INSERT INTO stock_applied (identity, consumer) VALUES (%s, 'python')", (ident,)))
            print(("applied " if applied else "duplicate ") + ident, flush=True)
            return CONSUME_SUCCESS
        except Exception as e:  # noqa: BLE001 - any failure: redeliver
            print("failed %s: %r" % (text(msg.id), e), flush=True)
            return RECONSUME_LATER

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(env["RECIPE_NAMESRV"])
    consumer.set_thread_count(1)
    consumer.set_message_batch_max_size(1)
    ffi_check(dll.Subscribe(consumer._handle, env["RECIPE_TOPIC"].encode(), b"*"))
    consumer._register_callback(on_message)
    consumer.start()
    print("started", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    consumer.shutdown()
    conn.close()


if __name__ == "__main__":
    main()
