//! Arrivals: the statement every node-signed request makes once its signature has verified
//! (the node that holds the key, the nonce recorded, the node's glance, its heartbeat stamped
//! when due), taken for the requests arriving together in one statement and one commit.
//!
//! Every signed request writes its nonce, so each used to cost its own commit: at 1,300 claims
//! a second on two cores the database spent most of its time waiting for the WAL to reach the
//! disk (`WALWrite`, `WALSync` in `pg_stat_activity`) and about 0.5 ms of CPU a claim. Here one
//! task takes what has queued while the previous statement ran, up to [`MOST_AT_ONCE`], and
//! answers each request with its own row once the statement has committed: a nonce is as
//! durable as before before any request is answered, a quiet plane still answers a lone
//! request at once (nothing waits for a batch to fill), and a busy one pays one commit for many.
//!
//! The lanes of `domain::claims::lane` hold here too: a statement takes the work lane's
//! arrivals (a claim for a node with a job waiting, a result) before any plain one, so in a
//! restart storm a request that moves a job waits for at most the statement already running.

use std::collections::HashMap;
use std::time::Duration;

use capstan_store::Store;
use tokio::sync::{mpsc, oneshot};

use crate::domain::claims::Lane;
use crate::store::{self, Arrival, Arriving};

/// The most arrivals one statement takes.
pub const MOST_AT_ONCE: usize = 128;

/// Why an arrival was not taken: the database failed (logged once for its whole batch, and not
/// told to the agent), or the service is stopping.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct NotTaken(String);

type Answer = Result<Option<Arrival>, NotTaken>;

struct Asked {
    arriving: Arriving,
    answer: oneshot::Sender<Answer>,
}

/// The queues of arrivals (one a lane), and the task that takes them. Cloning shares the
/// queues; the task ends when the last clone is dropped.
#[derive(Clone)]
pub struct Arrivals {
    work: mpsc::Sender<Asked>,
    plain: mpsc::Sender<Asked>,
}

impl Arrivals {
    /// Starts the task that takes arrivals on `store`, each nonce remembered for `window` and a
    /// heartbeat stamped at most every `resolution`.
    pub fn start(store: Store, window: Duration, resolution: Duration) -> Arrivals {
        let (work, work_asked) = mpsc::channel(MOST_AT_ONCE * 8);
        let (plain, plain_asked) = mpsc::channel(MOST_AT_ONCE * 32);
        let queues = Queues {
            work: work_asked,
            plain: plain_asked,
        };
        tokio::spawn(take(store, queues, window, resolution));
        Arrivals { work, plain }
    }

    /// The arrival of one request in `lane`, taken with whatever else arrived meanwhile: `None`
    /// when no node holds its key.
    pub async fn arrive(&self, arriving: Arriving, lane: Lane) -> Answer {
        let (answer, answered) = oneshot::channel();
        let queue = match lane {
            Lane::Work => &self.work,
            Lane::Plain => &self.plain,
        };
        queue
            .send(Asked { arriving, answer })
            .await
            .map_err(|_| stopping())?;
        answered.await.map_err(|_| stopping())?
    }

    /// Arrivals queued and not yet taken by a statement, in both lanes.
    pub fn queued(&self) -> usize {
        [&self.work, &self.plain]
            .iter()
            .map(|queue| queue.max_capacity() - queue.capacity())
            .sum()
    }
}

fn stopping() -> NotTaken {
    NotTaken("the agent channel is stopping".into())
}

struct Queues {
    work: mpsc::Receiver<Asked>,
    plain: mpsc::Receiver<Asked>,
}

impl Queues {
    /// Waits for an arrival in either lane, then fills `batch` with what is queued, the work
    /// lane's first, up to [`MOST_AT_ONCE`]. False once both queues have closed.
    async fn next(&mut self, batch: &mut Vec<Asked>) -> bool {
        let first = tokio::select! {
            biased;
            Some(asked) = self.work.recv() => asked,
            Some(asked) = self.plain.recv() => asked,
            else => return false,
        };
        batch.push(first);
        for queue in [&mut self.work, &mut self.plain] {
            while batch.len() < MOST_AT_ONCE {
                match queue.try_recv() {
                    Ok(asked) => batch.push(asked),
                    Err(_) => break,
                }
            }
        }
        true
    }
}

/// The task: waits for an arrival, takes every other one already queued (up to
/// [`MOST_AT_ONCE`], the work lane's first), runs them as one statement, answers each; until
/// the queues close.
async fn take(store: Store, mut queues: Queues, window: Duration, resolution: Duration) {
    let mut batch = Vec::with_capacity(MOST_AT_ONCE);
    while queues.next(&mut batch).await {
        metrics::histogram!("capstan_agent_arrivals_per_statement").record(batch.len() as f64);
        let (distinct, repeats) = split_repeats(&batch);
        let asked: Vec<Arriving> = distinct
            .iter()
            .map(|&index| batch[index].arriving.clone())
            .collect();
        let taken = match store.pool().acquire().await {
            Ok(mut connection) => store::arrive_all(&mut connection, &asked, window, resolution)
                .await
                .map_err(|error| error.to_string()),
            Err(error) => Err(error.to_string()),
        };
        let answers = answer_all(batch.len(), &distinct, &repeats, taken);
        for (asked, answer) in batch.drain(..).zip(answers) {
            // A request whose caller has gone (its gateway gave up) needs no answer.
            let _ = asked.answer.send(answer);
        }
    }
}

/// The arrivals of `batch` that go to the database (the first of each `(fingerprint, nonce)`)
/// and the repeats, each with the index of the first it repeats.
fn split_repeats(batch: &[Asked]) -> (Vec<usize>, Vec<(usize, usize)>) {
    let mut first: HashMap<(&str, &str), usize> = HashMap::with_capacity(batch.len());
    let (mut distinct, mut repeats) = (Vec::with_capacity(batch.len()), Vec::new());
    for (index, asked) in batch.iter().enumerate() {
        let key = (
            asked.arriving.fingerprint.as_str(),
            asked.arriving.nonce.as_str(),
        );
        match first.get(&key) {
            Some(&original) => repeats.push((index, original)),
            None => {
                first.insert(key, index);
                distinct.push(index);
            }
        }
    }
    (distinct, repeats)
}

/// Each arrival's answer, in the batch's order: the database's row for the distinct ones, and
/// for a repeat of a nonce within the batch, the node as its first saw it and never fresh (of
/// two requests with one nonce, one at most is taken; it is the first).
fn answer_all(
    size: usize,
    distinct: &[usize],
    repeats: &[(usize, usize)],
    taken: Result<Vec<Option<Arrival>>, String>,
) -> Vec<Answer> {
    let rows = match taken {
        Ok(rows) => rows,
        Err(error) => {
            tracing::error!(%error, arrivals = size, "agent arrivals not taken");
            return (0..size)
                .map(|_| Err(NotTaken("its database did not answer".into())))
                .collect();
        }
    };
    let mut answers: Vec<Answer> = (0..size).map(|_| Ok(None)).collect();
    for (&index, row) in distinct.iter().zip(rows) {
        answers[index] = Ok(row);
    }
    for &(index, original) in repeats {
        answers[index] = Ok(answers[original].clone().ok().flatten().map(|mut arrival| {
            arrival.fresh = false;
            arrival.stamped_at = None;
            arrival
        }));
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{LAST_SEEN_RESOLUTION, NONCE_WINDOW};
    use chrono::{DateTime, Utc};
    use std::sync::{Arc, Mutex};

    fn asked(fingerprint: &str, nonce: &str) -> Asked {
        let (answer, _) = oneshot::channel();
        Asked {
            arriving: Arriving {
                fingerprint: fingerprint.into(),
                nonce: nonce.into(),
                now: Utc::now(),
                stamp: true,
            },
            answer,
        }
    }

    #[test]
    fn a_nonce_repeated_within_one_batch_goes_to_the_database_once() {
        let batch = [
            asked("SHA256:a", "n1"),
            asked("SHA256:b", "n1"),
            asked("SHA256:a", "n1"),
            asked("SHA256:a", "n2"),
            asked("SHA256:a", "n1"),
        ];
        let (distinct, repeats) = split_repeats(&batch);
        assert_eq!(distinct, vec![0, 1, 3]);
        assert_eq!(repeats, vec![(2, 0), (4, 0)]);
    }

    #[test]
    fn a_failed_statement_answers_every_arrival_of_its_batch_with_the_error() {
        let answers = answer_all(3, &[0, 1], &[(2, 0)], Err("connection reset".into()));
        assert_eq!(answers.len(), 3);
        for answer in answers {
            let error = answer.unwrap_err().to_string();
            assert_eq!(error, "its database did not answer");
        }
    }

    #[test]
    fn an_unknown_key_is_answered_none_and_so_is_its_repeat() {
        let answers = answer_all(3, &[0, 1], &[(2, 1)], Ok(vec![None, None]));
        assert!(answers.iter().all(|answer| matches!(answer, Ok(None))));
    }

    fn arriving(fingerprint: &str, nonce: &str, stamp: bool) -> Arriving {
        Arriving {
            fingerprint: fingerprint.into(),
            nonce: nonce.into(),
            now: Utc::now(),
            stamp,
        }
    }

    /// A store of the test's own with `web-1` (heartbeat an hour old) and `web-2` (stamped
    /// now), and a transaction that holds the nonces table, so the first statement waits and
    /// what arrives meanwhile queues for the next one.
    async fn held() -> (
        capstan_store::testsuite::TestDatabase,
        Store,
        sqlx::Transaction<'static, sqlx::Postgres>,
    ) {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let store = Store::connect(database.url(), "agent_channel", 4)
            .await
            .unwrap();
        store.migrate(&crate::MIGRATOR).await.unwrap();
        sqlx::query(
            "INSERT INTO nodes (name, public_key, fingerprint, last_seen_at) VALUES \
             ('web-1', 'key-1', 'SHA256:web-1', now() - interval '1 hour'), \
             ('web-2', 'key-2', 'SHA256:web-2', now())",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let mut holding = store.begin().await.unwrap();
        sqlx::query("LOCK TABLE nonces IN EXCLUSIVE MODE")
            .execute(&mut *holding)
            .await
            .unwrap();
        (database, store, holding)
    }

    /// Until a statement waits for the table `held` locked.
    async fn until_a_statement_waits(store: &Store) {
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(store.pool())
            .await
            .unwrap();
            if waiting > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn until_queued(arrivals: &Arrivals, count: usize) {
        while arrivals.queued() < count {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Each arrival of one statement is answered as its own statement would have been: the
    /// first of two requests with one nonce is fresh and the second a replay, a key no node
    /// holds is none, a due heartbeat is stamped once, a recent one is not (PROTOCOL.md
    /// replay and AC-16's heartbeat).
    #[tokio::test]
    async fn arrivals_taken_in_one_statement_are_each_answered_as_alone() {
        let (_database, store, holding) = held().await;
        let arrivals = Arrivals::start(store.clone(), NONCE_WINDOW, LAST_SEEN_RESOLUTION);
        let first = tokio::spawn({
            let arrivals = arrivals.clone();
            async move {
                arrivals
                    .arrive(arriving("SHA256:web-2", "before", false), Lane::Plain)
                    .await
            }
        });
        // The first statement has taken `before` and waits on the table.
        until_a_statement_waits(&store).await;
        let asked = [
            arriving("SHA256:web-1", "one", true),
            arriving("SHA256:web-1", "one", true),
            arriving("SHA256:nobody", "one", true),
            arriving("SHA256:web-2", "two", true),
            arriving("SHA256:web-2", "before", false),
            arriving("SHA256:web-1", "three", false),
        ];
        let answering: Vec<_> = asked
            .iter()
            .cloned()
            .map(|arriving| {
                let arrivals = arrivals.clone();
                tokio::spawn(async move { arrivals.arrive(arriving, Lane::Plain).await })
            })
            .collect();
        until_queued(&arrivals, asked.len()).await;
        holding.rollback().await.unwrap();
        assert!(first.await.unwrap().unwrap().unwrap().fresh);
        let mut answers = Vec::new();
        for answer in answering {
            answers.push(answer.await.unwrap().unwrap());
        }
        let fresh: Vec<Option<bool>> = answers
            .iter()
            .map(|answer| answer.as_ref().map(|arrival| arrival.fresh))
            .collect();
        assert_eq!(
            fresh,
            [
                Some(true),
                Some(false),
                None,
                Some(true),
                Some(false),
                Some(true)
            ]
        );
        let nodes: Vec<&str> = answers
            .iter()
            .flatten()
            .map(|arrival| arrival.node.name.as_str())
            .collect();
        assert_eq!(nodes, ["web-1", "web-1", "web-2", "web-2", "web-1"]);
        // web-1's heartbeat was due: stamped by the fresh claim that asked for it, not by its
        // repeat nor by the request that asked for no stamp.
        let stamped: Vec<bool> = answers
            .iter()
            .flatten()
            .map(|arrival| arrival.stamped_at.is_some())
            .collect();
        assert_eq!(stamped, [true, false, false, false, true]);
        let seen: DateTime<Utc> =
            sqlx::query_scalar("SELECT last_seen_at FROM nodes WHERE name = 'web-1'")
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(Some(seen), answers[0].as_ref().unwrap().stamped_at);
        let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM nonces")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(recorded, 4, "before, one, two, three");
    }

    /// A restart storm's renewals do not bury work: a statement takes the work lane's arrivals
    /// before the plain ones queued ahead of them.
    #[tokio::test]
    async fn a_work_lane_arrival_is_taken_before_plain_ones_queued_ahead_of_it() {
        let (_database, store, holding) = held().await;
        let arrivals = Arrivals::start(store.clone(), NONCE_WINDOW, LAST_SEEN_RESOLUTION);
        let order: Arc<Mutex<Vec<String>>> = Arc::default();
        let ask = |nonce: String, lane: Lane| {
            let (arrivals, order) = (arrivals.clone(), order.clone());
            tokio::spawn(async move {
                let answer = arrivals
                    .arrive(arriving("SHA256:web-2", &nonce, false), lane)
                    .await;
                order.lock().unwrap().push(nonce);
                answer
            })
        };
        let mut answering = vec![ask("first".into(), Lane::Plain)];
        until_a_statement_waits(&store).await;
        let plain = MOST_AT_ONCE + 10;
        for index in 0..plain {
            answering.push(ask(format!("plain-{index}"), Lane::Plain));
        }
        until_queued(&arrivals, plain).await;
        answering.push(ask("work".into(), Lane::Work));
        until_queued(&arrivals, plain + 1).await;
        holding.rollback().await.unwrap();
        for answer in answering {
            assert!(answer.await.unwrap().unwrap().unwrap().fresh);
        }
        let order = order.lock().unwrap();
        let at = |nonce: &str| order.iter().position(|seen| seen == nonce).unwrap();
        // The statement after the first takes the work arrival and the first 127 plain ones;
        // the last plain ones wait for the one after.
        assert!(
            at("work") < at(&format!("plain-{}", plain - 1)),
            "{order:?}"
        );
    }

    /// A node row another transaction holds (an operator's act on it, a claim handing it a
    /// job) does not stall the statement, and so every arrival in it: its heartbeat is left
    /// due, for its claim to stamp in a slot of its own.
    #[tokio::test]
    async fn a_held_node_row_leaves_its_heartbeat_due_and_stalls_no_arrival() {
        let (_database, store, holding) = held().await;
        holding.rollback().await.unwrap();
        let mut holding = store.begin().await.unwrap();
        sqlx::query("SELECT id FROM nodes WHERE name = 'web-1' FOR UPDATE")
            .execute(&mut *holding)
            .await
            .unwrap();
        let arrivals = Arrivals::start(store.clone(), NONCE_WINDOW, LAST_SEEN_RESOLUTION);
        let answered = tokio::time::timeout(
            Duration::from_secs(10),
            arrivals.arrive(arriving("SHA256:web-1", "held", true), Lane::Plain),
        )
        .await
        .expect("answered while the row is held")
        .unwrap()
        .unwrap();
        assert!(answered.fresh);
        assert_eq!(answered.stamped_at, None, "left due");
        holding.rollback().await.unwrap();
        let answered = arrivals
            .arrive(arriving("SHA256:web-1", "free", true), Lane::Plain)
            .await
            .unwrap()
            .unwrap();
        assert!(
            answered.stamped_at.is_some(),
            "stamped once the row is free"
        );
    }
}
