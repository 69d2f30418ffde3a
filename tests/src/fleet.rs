//! A large fleet written straight into a plane's agent-channel tables, in a few bulk
//! statements: for the listing tests and the browser benchmark, which need thousands of nodes
//! and joins without thousands of agents. The rows are those the service itself writes
//! (paired nodes, finished `check_status` and `host_report` jobs, pending joins, and the health
//! dots the monitor's `health_changed` would have told it of those checks).
//!
//! Node `i` (from 1) is called `node-<i, five digits>`, has the address `10.<i/256>.<i%256>.7`,
//! and:
//! * every tenth node has no paired key (the rest have the fingerprint `SHA256:seed<md5 of i>`);
//! * every third node was last heard an hour ago (offline), the rest just now (online);
//! * its latest `check_status`: none when `i % 11 == 0` (gray), disk 95 % when `i % 7 == 0`
//!   (red), load 7 when `i % 7 == 1` (yellow), else all well (green);
//! * every fiftieth node is a Docker host whose `host_report` lists `ct-<i+1>` to `ct-<i+5>`,
//!   and nodes `i+1` to `i+5` are those containers (so they sit on it): their own
//!   `host_report`s carry the host's kernel boot id, `boot-<i>` (issue 27's corroboration).
//!
//! Join `k` (from 1) asks as `asker-<k, five digits>` from `192.0.<k/256>.<k%256>` with the
//! fingerprint `SHA256:join<md5 of k>`.

use capstan_store::Store;

/// Writes `nodes` nodes (with their readings) and `joins` pending joins into the agent-channel
/// schema of the database at `url`.
pub async fn seed(url: &str, nodes: i64, joins: i64) {
    let store = Store::connect(url, "agent_channel", 1)
        .await
        .expect("the plane's database");
    let mut connection = store.pool().acquire().await.unwrap();
    sqlx::query(
        "INSERT INTO nodes (name, public_key, fingerprint, addresses, container, agent_version,
                            vocabulary, connected_at, last_seen_at)
         SELECT format('node-%s', lpad(i::text, 5, '0')),
                CASE WHEN i % 10 = 0 THEN NULL ELSE 'seeded-key-' || i END,
                CASE WHEN i % 10 = 0 THEN NULL ELSE 'SHA256:seed' || md5(i::text) END,
                jsonb_build_array(format('10.%s.%s.7', i / 256, i % 256)),
                CASE WHEN i % 50 BETWEEN 1 AND 5 AND i > 50 THEN format('ct-%s', i) END,
                '1.0.0', '[\"check_status\", \"host_report\"]', now(),
                CASE WHEN i % 3 = 0 THEN now() - interval '1 hour' ELSE now() END
         FROM generate_series(1, $1::bigint) AS i",
    )
    .bind(nodes)
    .execute(&mut *connection)
    .await
    .expect("nodes seeded");
    // The readings, against the ids just given (the table may have held rows before).
    sqlx::query(
        "INSERT INTO jobs (node_id, primitive, class, params, state, outcome, result, requested_by,
                           budget_s, created_at, claimed_at, finished_at)
         SELECT n.id, 'check_status', 'read', '{}', 'completed', 'completed',
                CASE WHEN s.i % 7 = 0 THEN '{\"disk\": {\"used_percent\": 95.0}, \"load\": {\"1m\": 0.5}}'::jsonb
                     WHEN s.i % 7 = 1 THEN '{\"disk\": {\"used_percent\": 40.0}, \"load\": {\"1m\": 7.0}}'::jsonb
                     ELSE '{\"disk\": {\"used_percent\": 40.0}, \"load\": {\"1m\": 0.5},
                            \"postgresql\": {\"answers\": true}}'::jsonb END,
                'seed', 60, now(), now(), now()
         FROM nodes n
         JOIN LATERAL (SELECT substring(n.name FROM 6)::bigint AS i) AS s ON true
         WHERE n.name LIKE 'node-%' AND s.i % 11 <> 0",
    )
    .execute(&mut *connection)
    .await
    .expect("checks seeded");
    // The monitor's judgement of those checks (MO-07), as the agent channel keeps it.
    sqlx::query(
        "INSERT INTO node_health (node_id, dot, reasons, checked_at)
         SELECT n.id,
                CASE WHEN s.i % 7 = 0 THEN 'red' WHEN s.i % 7 = 1 THEN 'yellow' ELSE 'green' END,
                CASE WHEN s.i % 7 = 0 THEN '[\"disk 95.0% full (over 90%)\"]'::jsonb
                     WHEN s.i % 7 = 1 THEN '[\"load average 7.00 (over 5)\"]'::jsonb
                     ELSE '[]'::jsonb END,
                now()
         FROM nodes n
         JOIN LATERAL (SELECT substring(n.name FROM 6)::bigint AS i) AS s ON true
         WHERE n.name LIKE 'node-%' AND s.i % 11 <> 0",
    )
    .execute(&mut *connection)
    .await
    .expect("health dots seeded");
    sqlx::query(
        "INSERT INTO jobs (node_id, primitive, class, params, state, outcome, result, requested_by,
                           budget_s, created_at, claimed_at, finished_at)
         SELECT n.id, 'host_report', 'read', '{}'::jsonb, 'completed', 'completed',
                jsonb_build_object('docker', 'installed', 'boot_id', format('boot-%s', s.i),
                    'containers',
                    (SELECT jsonb_agg(jsonb_build_object('name', format('ct-%s', s.i + k), 'state', 'running'))
                     FROM generate_series(1, 5) AS k)),
                'seed', 60, now(), now(), now()
         FROM nodes n
         JOIN LATERAL (SELECT substring(n.name FROM 6)::bigint AS i) AS s ON true
         WHERE n.name LIKE 'node-%' AND s.i % 50 = 0
         UNION ALL
         SELECT n.id, 'host_report', 'read', '{}'::jsonb, 'completed', 'completed',
                jsonb_build_object('docker', 'absent', 'boot_id', format('boot-%s', s.i - s.i % 50)),
                'seed', 60, now(), now(), now()
         FROM nodes n
         JOIN LATERAL (SELECT substring(n.name FROM 6)::bigint AS i) AS s ON true
         WHERE n.name LIKE 'node-%' AND s.i % 50 BETWEEN 1 AND 5 AND s.i > 50",
    )
    .execute(&mut *connection)
    .await
    .expect("host reports seeded");
    sqlx::query(
        "INSERT INTO joins (id, public_key, fingerprint, name, source_address, addresses,
                            agent_version, state, expires_at, source_network)
         SELECT gen_random_uuid(), 'seeded-join-key-' || k, 'SHA256:join' || md5(k::text),
                format('asker-%s', lpad(k::text, 5, '0')),
                format('192.0.%s.%s', k / 256, k % 256),
                jsonb_build_array(format('192.0.%s.%s', k / 256, k % 256)),
                '1.0.0', 'pending', now() + interval '1 hour',
                format('192.0.%s.%s', k / 256, k % 256)
         FROM generate_series(1, $1::bigint) AS k",
    )
    .bind(joins)
    .execute(&mut *connection)
    .await
    .expect("joins seeded");
    for table in [
        "ANALYZE nodes",
        "ANALYZE jobs",
        "ANALYZE joins",
        "ANALYZE node_health",
    ] {
        sqlx::query(table).execute(&mut *connection).await.ok();
    }
    drop(connection);
    store.close().await;
}
