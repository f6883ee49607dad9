# SPDX-License-Identifier: Apache-2.0
"""Writes orders and their outbox rows from Python with PyMySQL, as docs/sql-recipes.md shows
(the part between the recipe markers is the doc's code). The test in internal/brokersuite runs
it against MariaDB and checks what the relay delivers.

Run: python3 order_outbox.py   (settings from RECIPE_* environment variables)
"""
import os

# recipe:start
import json
import uuid

import pymysql


def create_order(conn, topic, order_no, amount, rest_of_transaction=lambda: None):
    try:
        with conn.cursor() as cur:  # DB-API connections start a transaction implicitly
            cur.execute("INSERT INTO orders (order_no, amount) VALUES (%s, %s)", (order_no, amount))
            cur.execute(
                "INSERT INTO local_message (msg_id, topic, tag, content, msg_keys) VALUES (%s, %s, %s, %s, %s)",
                (str(uuid.uuid4()), topic, "created",  # the event: tag + keys identify it
                 json.dumps({"orderNo": order_no, "amount": amount}), order_no),
            )
        rest_of_transaction()  # may raise: then neither row exists
        conn.commit()
    except Exception:
        conn.rollback()
        raise
# recipe:end


class Declined(Exception):
    pass


def main():
    env = os.environ
    conn = pymysql.connect(host=env["RECIPE_MYSQL_HOST"], port=int(env["RECIPE_MYSQL_PORT"]),
                           user=env["RECIPE_MYSQL_USER"], password=env["RECIPE_MYSQL_PASSWORD"],
                           database=env["RECIPE_MYSQL_DATABASE"], charset="utf8mb4")
    every = int(env["RECIPE_ROLLBACK_EVERY"])
    nudge = None
    if env.get("RECIPE_NUDGE_CHANNEL"):  # docs/sql-recipes.md#nudging-the-relay
        import redis
        r = redis.Redis(host=env["RECIPE_REDIS_HOST"], port=int(env["RECIPE_REDIS_PORT"]))

        def nudge():
            try:
                r.publish(env["RECIPE_NUDGE_CHANNEL"], "1")
            except redis.RedisError:
                pass  # a hint: the relay polls anyway
    for i in range(int(env["RECIPE_ORDERS"])):
        order_no = env["RECIPE_ORDER_PREFIX"] + str(i)

        def rest(fail=(i % every == every - 1), order_no=order_no):
            if fail:
                raise Declined("payment declined for " + order_no)

        try:
            create_order(conn, env["RECIPE_TOPIC"], order_no, f"{i}.50", rest)
        except Declined:
            continue  # rolled back on purpose
        if nudge:
            nudge()  # after the commit, never inside the transaction
    conn.close()


if __name__ == "__main__":
    main()
