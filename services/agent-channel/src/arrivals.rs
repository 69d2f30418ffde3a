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
//! arrivals (a claim for a node with a job waiting, a result) before any plain one, then the
//! plain arrivals whose node has been rung for since they queued (a job was queued for it: the
//! claim will hand it out), then the plain ones in their order. So in a restart storm, with
//! thousands of renewals queued, a request that moves a job waits for at most the statement
//! already running. An arrival whose caller has gone (its gateway gave up on it) is dropped
//! unread: it records no nonce, and nobody is answered for it.

use capstan_events::NodeId;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_store::{Store, StoreError};
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::domain::claims::Lane;
use crate::store::{self, Arrival, Arriving};
use crate::wake::Wake;

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
    /// The node the request's key proved, when this replica knew it from memory.
    node: Option<NodeId>,
    answer: oneshot::Sender<Answer>,
}

/// The arrivals queued in each lane.
#[derive(Default)]
struct Lanes {
    work: VecDeque<Asked>,
    plain: VecDeque<Asked>,
    /// The wake-ups' count when the plain lane was last looked through for nodes rung for.
    looked_at: u64,
    closed: bool,
}

struct Shared {
    lanes: Mutex<Lanes>,
    queued: Notify,
    wake: Arc<Wake>,
}

impl Shared {
    fn lanes(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes
            .lock()
            .expect("the arrivals' lanes are never poisoned")
    }
}

/// The queues of arrivals (one a lane), and the task that takes them. Cloning shares the
/// queues; the task ends when the last clone is dropped.
#[derive(Clone)]
pub struct Arrivals {
    shared: Arc<Shared>,
    _open: Arc<DropGuard>,
}

impl Arrivals {
    /// Starts the task that takes arrivals on `store`, each nonce remembered for `window` and a
    /// heartbeat stamped at most every `resolution`; `wake` says which nodes have work waiting.
    pub fn start(
        store: Store,
        wake: Arc<Wake>,
        window: Duration,
        resolution: Duration,
    ) -> Arrivals {
        let shared = Arc::new(Shared {
            lanes: Mutex::default(),
            queued: Notify::new(),
            wake,
        });
        let open = CancellationToken::new();
        tokio::spawn(take(
            store,
            shared.clone(),
            open.clone(),
            window,
            resolution,
        ));
        Arrivals {
            shared,
            _open: Arc::new(open.drop_guard()),
        }
    }

    /// The arrival of one request of `node` (if this replica knows it) in `lane`, taken with
    /// whatever else arrived meanwhile: `None` when no node holds its key.
    pub async fn arrive(&self, arriving: Arriving, node: Option<NodeId>, lane: Lane) -> Answer {
        let (answer, answered) = oneshot::channel();
        let asked = Asked {
            arriving,
            node,
            answer,
        };
        {
            let mut lanes = self.shared.lanes();
            if lanes.closed {
                return Err(stopping());
            }
            match lane {
                Lane::Work => lanes.work.push_back(asked),
                Lane::Plain => lanes.plain.push_back(asked),
            }
        }
        self.shared.queued.notify_one();
        answered.await.map_err(|_| stopping())?
    }

    /// Arrivals queued and not yet taken by a statement, in both lanes.
    #[cfg(test)]
    pub fn queued(&self) -> usize {
        let lanes = self.shared.lanes();
        lanes.work.len() + lanes.plain.len()
    }
}

fn stopping() -> NotTaken {
    NotTaken("the agent channel is stopping".into())
}

impl Lanes {
    /// Fills `batch`, up to [`MOST_AT_ONCE`]: the work lane's arrivals, then the plain ones
    /// whose node has work waiting (looked for only when a bell rang since the last look), then
    /// the plain ones in their order. Arrivals nobody waits for any more are dropped.
    fn take(&mut self, wake: &Wake, batch: &mut Vec<Asked>) {
        fn fill(queue: &mut VecDeque<Asked>, batch: &mut Vec<Asked>) {
            while batch.len() < MOST_AT_ONCE {
                match queue.pop_front() {
                    Some(asked) if asked.answer.is_closed() => continue,
                    Some(asked) => batch.push(asked),
                    None => break,
                }
            }
        }
        fill(&mut self.work, batch);
        let generation = wake.generation();
        if batch.len() < MOST_AT_ONCE && generation != self.looked_at {
            let mut index = 0;
            while index < self.plain.len() && batch.len() < MOST_AT_ONCE {
                if self.plain[index]
                    .node
                    .is_some_and(|node| wake.has_work(node))
                {
                    batch.extend(self.plain.remove(index));
                } else {
                    index += 1;
                }
            }
            // A look cut short by a full batch is taken again next time.
            if index >= self.plain.len() {
                self.looked_at = generation;
            }
        }
        fill(&mut self.plain, batch);
    }
}

/// The task: waits for an arrival, takes every other one already queued (up to
/// [`MOST_AT_ONCE`], in the lanes' order), runs them as one statement, answers each; until the
/// last [`Arrivals`] is dropped, when whatever is still queued is answered that the service is
/// stopping.
async fn take(
    store: Store,
    shared: Arc<Shared>,
    open: CancellationToken,
    window: Duration,
    resolution: Duration,
) {
    let mut batch = Vec::with_capacity(MOST_AT_ONCE);
    loop {
        shared.lanes().take(&shared.wake, &mut batch);
        if batch.is_empty() {
            tokio::select! {
                _ = shared.queued.notified() => continue,
                _ = open.cancelled() => break,
            }
        }
        metrics::histogram!("capstan_agent_arrivals_per_statement").record(batch.len() as f64);
        let (distinct, repeats) = split_repeats(&batch);
        let asked: Vec<Arriving> = distinct
            .iter()
            .map(|&index| batch[index].arriving.clone())
            .collect();
        let taken = match store.pool().acquire().await {
            Ok(mut connection) => {
                store::arrive_all(&mut connection, &asked, window, resolution).await
            }
            Err(error) => Err(StoreError::from(error)),
        };
        let answers = answer_all(batch.len(), &distinct, &repeats, taken);
        for (asked, answer) in batch.drain(..).zip(answers) {
            // A request whose caller has gone (its gateway gave up) needs no answer.
            let _ = asked.answer.send(answer);
        }
    }
    // Dropping what is queued answers each caller that the service is stopping.
    let mut lanes = shared.lanes();
    lanes.closed = true;
    lanes.work.clear();
    lanes.plain.clear();
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
    taken: Result<Vec<Option<Arrival>>, StoreError>,
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
            node: None,
            answer,
        }
    }

    /// An arrival of `node` with the nonce `nonce`, and what waits for its answer.
    fn waited_for(node: NodeId, nonce: &str) -> (Asked, oneshot::Receiver<Answer>) {
        let (answer, answered) = oneshot::channel();
        let mut asked = asked(&format!("SHA256:node-{node}"), nonce);
        asked.node = Some(node);
        asked.answer = answer;
        (asked, answered)
    }

    fn nonces(batch: &[Asked]) -> Vec<&str> {
        batch
            .iter()
            .map(|asked| asked.arriving.nonce.as_str())
            .collect()
    }

    /// A restart storm: thousands of renewals queued in the plain lane, then a job queued for
    /// a node whose renewal is among them. That claim will hand the job out, so it is taken
    /// with the next statement, not after the renewals before it (issue 10's storm).
    #[test]
    fn a_plain_arrival_whose_node_is_rung_for_is_taken_before_the_plain_ones_ahead_of_it() {
        let wake = Wake::default();
        let mut lanes = Lanes::default();
        let mut waiting = Vec::new();
        for node in 1..=(MOST_AT_ONCE as i64 + 50) {
            let (asked, answered) = waited_for(NodeId(node), &format!("renewal-{node}"));
            lanes.plain.push_back(asked);
            waiting.push(answered);
        }
        let (work, _work_answered) = waited_for(NodeId(9_999), "result");
        lanes.work.push_back(work);
        wake.ring(NodeId(150));
        let mut batch = Vec::new();
        lanes.take(&wake, &mut batch);
        assert_eq!(batch.len(), MOST_AT_ONCE);
        assert_eq!(nonces(&batch)[..3], ["result", "renewal-150", "renewal-1"]);
        batch.clear();
        lanes.take(&wake, &mut batch);
        // 178 renewals, 127 of them taken with the result.
        assert_eq!(batch.len(), 51, "the rest, in their order");
        assert_eq!(nonces(&batch)[0], "renewal-127");
        assert!(!nonces(&batch).contains(&"renewal-150"));
    }

    #[test]
    fn an_arrival_nobody_waits_for_any_more_is_dropped_unread() {
        let wake = Wake::default();
        let mut lanes = Lanes::default();
        let (kept, _kept_answered) = waited_for(NodeId(1), "kept");
        let (gone, gone_answered) = waited_for(NodeId(2), "gone");
        drop(gone_answered);
        lanes.plain.extend([gone, kept]);
        let mut batch = Vec::new();
        lanes.take(&wake, &mut batch);
        assert_eq!(nonces(&batch), ["kept"]);
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
        let answers = answer_all(
            3,
            &[0, 1],
            &[(2, 0)],
            Err(StoreError::Database("connection reset".into())),
        );
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

    /// The arrivals' task on `store`, with no node rung for.
    fn started(store: &Store) -> Arrivals {
        Arrivals::start(
            store.clone(),
            Arc::default(),
            NONCE_WINDOW,
            LAST_SEEN_RESOLUTION,
        )
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
        let arrivals = started(&store);
        let first = tokio::spawn({
            let arrivals = arrivals.clone();
            async move {
                arrivals
                    .arrive(
                        arriving("SHA256:web-2", "before", false),
                        Some(NodeId(2)),
                        Lane::Plain,
                    )
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
                tokio::spawn(async move { arrivals.arrive(arriving, None, Lane::Plain).await })
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
        let arrivals = started(&store);
        let order: Arc<Mutex<Vec<String>>> = Arc::default();
        let ask = |nonce: String, lane: Lane| {
            let (arrivals, order) = (arrivals.clone(), order.clone());
            tokio::spawn(async move {
                let answer = arrivals
                    .arrive(
                        arriving("SHA256:web-2", &nonce, false),
                        Some(NodeId(2)),
                        lane,
                    )
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
        let arrivals = started(&store);
        let answered = tokio::time::timeout(
            Duration::from_secs(10),
            arrivals.arrive(
                arriving("SHA256:web-1", "held", true),
                Some(NodeId(1)),
                Lane::Plain,
            ),
        )
        .await
        .expect("answered while the row is held")
        .unwrap()
        .unwrap();
        assert!(answered.fresh);
        assert_eq!(answered.stamped_at, None, "left due");
        holding.rollback().await.unwrap();
        let answered = arrivals
            .arrive(
                arriving("SHA256:web-1", "free", true),
                Some(NodeId(1)),
                Lane::Plain,
            )
            .await
            .unwrap()
            .unwrap();
        assert!(
            answered.stamped_at.is_some(),
            "stamped once the row is free"
        );
    }
}
