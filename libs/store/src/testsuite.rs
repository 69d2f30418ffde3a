//! A database of a test's own: created with a unique name on the local PostgreSQL (or the
//! server `CAPSTAN_TEST_DATABASE_URL` names), dropped when the test ends.

use sqlx::{Connection, Executor, PgConnection};

/// The server tests create their databases on.
pub fn admin_url() -> String {
    std::env::var("CAPSTAN_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// A fresh, empty database, dropped (with its connections) on drop.
pub struct TestDatabase {
    name: String,
    url: String,
}

impl TestDatabase {
    pub async fn create() -> TestDatabase {
        let name = format!("capstan_test_{}", uuid::Uuid::now_v7().simple());
        let admin = admin_url();
        let mut connection = PgConnection::connect(&admin)
            .await
            .expect("PostgreSQL is running for the tests (CAPSTAN_TEST_DATABASE_URL)");
        connection
            .execute(format!("CREATE DATABASE \"{name}\"").as_str())
            .await
            .expect("the test role may create databases");
        connection.close().await.ok();
        let base = admin
            .rsplit_once('/')
            .map(|(base, _)| base)
            .unwrap_or(&admin);
        TestDatabase {
            url: format!("{base}/{name}"),
            name,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop may run inside a runtime; do the async work on a thread of its own.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to drop the test database");
            runtime.block_on(async move {
                if let Ok(mut connection) = PgConnection::connect(&admin_url()).await {
                    let _ = connection
                        .execute(
                            format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)").as_str(),
                        )
                        .await;
                }
            });
        })
        .join();
    }
}
