// SPDX-License-Identifier: Apache-2.0
// Writes orders and their outbox rows from Node.js with mysql2, as docs/sql-recipes.md shows
// (the part between the recipe markers is the doc's code). The test in internal/brokersuite
// runs it against MariaDB and checks what the relay delivers.
//
// Run: node order_outbox.js   (settings from RECIPE_* environment variables)
'use strict';

// recipe:start
const mysql = require('mysql2/promise');
const { randomUUID } = require('crypto');

async function createOrder(pool, topic, orderNo, amount, restOfTransaction = async () => {}) {
  const conn = await pool.getConnection();
  try {
    await conn.beginTransaction();
    await conn.execute('INSERT INTO orders (order_no, amount) VALUES (?, ?)', [orderNo, amount]);
    await conn.execute(
      'INSERT INTO local_message (msg_id, topic, tag, content, msg_keys) VALUES (?, ?, ?, ?, ?)',
      [randomUUID(), topic, 'created', JSON.stringify({ orderNo, amount }), orderNo],
    );
    await restOfTransaction(); // may throw: then neither row exists
    await conn.commit();
  } catch (err) {
    await conn.rollback();
    throw err;
  } finally {
    conn.release();
  }
}
// recipe:end

class Declined extends Error {}

async function main() {
  const env = process.env;
  const pool = mysql.createPool({
    host: env.RECIPE_MYSQL_HOST, port: Number(env.RECIPE_MYSQL_PORT), user: env.RECIPE_MYSQL_USER,
    password: env.RECIPE_MYSQL_PASSWORD, database: env.RECIPE_MYSQL_DATABASE,
  });
  const every = Number(env.RECIPE_ROLLBACK_EVERY);
  for (let i = 0; i < Number(env.RECIPE_ORDERS); i++) {
    const orderNo = env.RECIPE_ORDER_PREFIX + i;
    const fail = i % every === every - 1;
    try {
      await createOrder(pool, env.RECIPE_TOPIC, orderNo, `${i}.50`, async () => {
        if (fail) throw new Declined(`payment declined for ${orderNo}`);
      });
    } catch (err) {
      if (!(err instanceof Declined)) throw err; // rolled back on purpose
    }
  }
  await pool.end();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
