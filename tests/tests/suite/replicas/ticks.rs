//! One replica per periodic tick through a lost connection: a tick's lock is held by its own
//! transaction ([`capstan_store::Store::lead_tick`]), so when PostgreSQL ends the connection
//! holding the lock, nothing the tick did as leader is committed.

use capstan_store::{testsuite::TestDatabase, Store};
use sqlx::Executor;

const LOCK: &str = "capstan-test-tick";

#[tokio::test]
async fn a_tick_whose_lock_connection_is_terminated_commits_nothing_as_leader() {
    let database = TestDatabase::create().await;
    let admin = sqlx::PgPool::connect(database.url()).await.unwrap();
    let store = Store::connect(database.url(), "ticks", 4).await.unwrap();
    store
        .pool()
        .execute("CREATE TABLE swept (what TEXT NOT NULL)")
        .await
        .unwrap();
    let other_replica = Store::connect(database.url(), "ticks", 2).await.unwrap();

    let mut tick = store
        .lead_tick(LOCK)
        .await
        .unwrap()
        .expect("no one else leads");
    assert!(
        other_replica.lead_tick(LOCK).await.unwrap().is_none(),
        "one replica per tick"
    );
    sqlx::query("INSERT INTO swept (what) VALUES ('done as leader')")
        .execute(&mut *tick)
        .await
        .unwrap();

    // PostgreSQL ends whichever backend holds the tick's lock.
    let holder: i32 = sqlx::query_scalar(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(holder)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert!(terminated);

    let committed = tick.commit().await;
    assert!(committed.is_err(), "a tick without its lock cannot commit");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM ticks.swept")
        .fetch_one(&admin)
        .await
        .unwrap();
    assert_eq!(rows, 0, "nothing the tick did as leader is kept");
    // The lock went with the connection: another replica leads the next tick.
    assert!(other_replica.lead_tick(LOCK).await.unwrap().is_some());
}

/// Found by the fault tests: two `capstan all` started together on a fresh database failed
/// now and then with "duplicate key value violates unique constraint pg_namespace_nspname_index"
/// as both created the same schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_together_on_a_fresh_database_all_start() {
    for _ in 0..5 {
        let database = TestDatabase::create().await;
        let starting: Vec<_> = (0..6)
            .map(|_| {
                let url = database.url().to_string();
                tokio::spawn(async move { Store::connect(&url, "billing", 1).await.map(|_| ()) })
            })
            .collect();
        for replica in starting {
            replica.await.unwrap().expect("every replica connects");
        }
    }
}
