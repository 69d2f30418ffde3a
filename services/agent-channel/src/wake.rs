//! Long polls: a claim with `wait` sleeps until a job is queued for its node. The insert's
//! trigger sends `NOTIFY capstan_agent_channel_jobs, '<node id>'` at commit; every replica
//! listens, so the claim wakes whichever replica holds it. A gateway that stops releases the
//! long polls it forwarded ([`Wake::release`]): they end at once without a job, since nobody is
//! left to take one to the agent. A gateway releases one claim alone ([`Wake::release_poll`])
//! when its agent hung up or when it gave up waiting for the claim's answer; a job that claim
//! had handed out already is named then, to go back to `pending` ([`Wake::handed_out`]).
//!
//! The same wake-ups keep the nodes with work waiting ([`Wake::has_work`]): a request of such a
//! node goes ahead of plain renewals when it waits for a slot (`domain::claims::lane`).

use capstan_events::NodeId;
use capstan_store::Store;
use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;
use uuid::Uuid;

pub const CHANNEL: &str = "capstan_agent_channel_jobs";

/// What ends a held claim early ([`Wake::released_for`]).
pub struct Released {
    gateway: Option<Arc<CancellationToken>>,
    poll: Option<Arc<CancellationToken>>,
}

impl Released {
    /// Resolves once the claim's gateway stops or its agent hung up; never without either.
    pub async fn cancelled(&self) {
        let token = |token: &Option<Arc<CancellationToken>>| {
            let token = token.clone();
            async move {
                match token {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            }
        };
        tokio::select! {
            _ = token(&self.gateway) => {}
            _ = token(&self.poll) => {}
        }
    }
}

/// The nodes claims are waiting for.
#[derive(Default)]
pub struct Wake {
    waiting: Mutex<HashMap<NodeId, Arc<Notify>>>,
    /// How many times any bell was rung: a claim compares it across the moments between its
    /// first read and arming its bell, when a ring would find nobody to wake.
    rung: AtomicU64,
    /// Per gateway process, the token its long polls end on when it stops. A released token
    /// stays (cancelled) until pruned, so a claim that arrives just after the release is not
    /// held either.
    gateways: Mutex<HashMap<Uuid, Arc<CancellationToken>>>,
    /// Nodes with a job waiting, each with the ring count when it was last rung (or found with
    /// one); a claim that looks and finds none takes its node out ([`Wake::settle`]).
    work: Mutex<HashMap<NodeId, u64>>,
    /// Per poll, the job its claim handed out and when, kept [`HANDED_KEPT`]: a release of that
    /// poll coming after the hand-out (its answer reached no agent) names the job to hand back.
    handed: Mutex<HashMap<Uuid, (i64, Instant)>>,
}

/// How long a claim's hand-out is remembered for a late release of its poll: longer than any
/// gateway waits for a claim's answer (its 30 s wait and margin), and within the hand-back's own
/// bound (`HAND_BACK_WITHIN_SECONDS`).
pub const HANDED_KEPT: Duration = Duration::from_secs(90);

impl Wake {
    /// Taken before a claim's first read of its node's jobs; see [`Wake::rung_since`].
    pub fn generation(&self) -> u64 {
        self.rung.load(Ordering::SeqCst)
    }

    /// Whether any bell rang since `generation`. A claim reads its node's jobs before it knows
    /// which bell to arm; a job queued in between rings a bell nobody holds yet, so a claim
    /// whose bell is armed must not trust that read when this is true, and looks again.
    pub fn rung_since(&self, generation: u64) -> bool {
        self.generation() != generation
    }

    /// The bell of `node_id`; arm its `notified()` before looking for a job, then await it.
    pub fn bell(&self, node_id: NodeId) -> Arc<Notify> {
        let mut waiting = self.waiting.lock().expect("the wake map is never poisoned");
        waiting.entry(node_id).or_default().clone()
    }

    pub fn ring(&self, node_id: NodeId) {
        // Counted before anyone is woken: a claim that then finds the count unchanged armed its
        // bell before this ring looks for it.
        let rung = self.rung.fetch_add(1, Ordering::SeqCst) + 1;
        self.work
            .lock()
            .expect("the wake map is never poisoned")
            .insert(node_id, rung);
        let bell = self
            .waiting
            .lock()
            .expect("the wake map is never poisoned")
            .get(&node_id)
            .cloned();
        if let Some(bell) = bell {
            bell.notify_waiters();
        }
    }

    /// Whether a job waits for `node_id`, as far as this replica has heard: queued at start-up
    /// ([`Wake::expect_work`]) or rung for since a claim of the node last looked.
    pub fn has_work(&self, node_id: NodeId) -> bool {
        self.work
            .lock()
            .expect("the wake map is never poisoned")
            .contains_key(&node_id)
    }

    /// Runs `waiting` (a wait for a permit, in practice) unless a job waits for `node_id` or is
    /// queued for it meanwhile: `None` when the node has work, whether before or while it waits,
    /// else what `waiting` gave. The bell is armed before the look at [`Wake::has_work`], so a
    /// ring just after that look still ends the wait.
    pub async fn until_work<F: std::future::Future>(
        &self,
        node_id: NodeId,
        waiting: F,
    ) -> Option<F::Output> {
        let bell = self.bell(node_id);
        let rung = bell.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        if self.has_work(node_id) {
            return None;
        }
        tokio::select! {
            done = waiting => Some(done),
            _ = rung => None,
        }
    }

    /// Reads the nodes with jobs waiting, at start-up; how many there are.
    pub async fn warm(&self, store: &Store) -> Result<usize, capstan_store::StoreError> {
        let mut connection = store.pool().acquire().await?;
        let nodes = crate::store::nodes_with_pending(&mut connection).await?;
        drop(connection);
        self.expect_work(nodes.iter().copied());
        Ok(nodes.len())
    }

    /// The nodes that had jobs waiting when this replica started.
    pub fn expect_work(&self, nodes: impl IntoIterator<Item = NodeId>) {
        let rung = self.generation();
        let mut work = self.work.lock().expect("the wake map is never poisoned");
        for node in nodes {
            work.entry(node).or_insert(rung);
        }
    }

    /// What a read of `node_id`'s jobs found, `pending` or not, the read taken after the ring
    /// count was `generation`: a node found with none leaves the set, unless it was rung for
    /// since (that job may have committed after the read); one found with a job joins it.
    pub fn settle(&self, node_id: NodeId, generation: u64, pending: bool) {
        let mut work = self.work.lock().expect("the wake map is never poisoned");
        if pending {
            work.entry(node_id).or_insert(generation);
        } else if work.get(&node_id).is_some_and(|rung| *rung <= generation) {
            work.remove(&node_id);
        }
    }

    /// What ends the long polls forwarded by `gateway` when it stops.
    pub fn released(&self, gateway: Uuid) -> Arc<CancellationToken> {
        let mut gateways = self
            .gateways
            .lock()
            .expect("the wake map is never poisoned");
        gateways.entry(gateway).or_default().clone()
    }

    /// What ends one claim: its gateway's stop, or (for `poll`) its own agent hanging up
    /// ([`Wake::release`] with the poll's id, which shares the gateways' map: both are fresh
    /// v7 ids).
    pub fn released_for(&self, gateway: Option<Uuid>, poll: Option<Uuid>) -> Released {
        Released {
            gateway: gateway.map(|gateway| self.released(gateway)),
            poll: poll.map(|poll| self.released(poll)),
        }
    }

    /// Records that the claim of `poll` handed out `job`. True when that poll was released
    /// already (its agent hung up, or its gateway gave up on the answer): the answer reaches
    /// nobody, so the claim hands the job back itself and answers none. Under one lock with
    /// [`Wake::release_poll`], so exactly one of the two hands a job back.
    pub fn handed_out(&self, poll: Uuid, job: i64) -> bool {
        let mut handed = self.handed.lock().expect("the wake map is never poisoned");
        if self.released(poll).is_cancelled() {
            return true;
        }
        handed.insert(poll, (job, Instant::now()));
        false
    }

    /// Releases one claim (its gateway gave up on it, or its agent hung up): ends it if it is
    /// held here, and takes the job it had handed out already, if any, which never reached its
    /// agent. How many claims it ended, and that job.
    pub fn release_poll(&self, poll: Uuid) -> (u64, Option<i64>) {
        let mut handed = self.handed.lock().expect("the wake map is never poisoned");
        let released = self.release(poll);
        (released, handed.remove(&poll).map(|(job, _)| job))
    }

    /// Ends every long poll `gateway` forwarded here; how many were waiting.
    pub fn release(&self, gateway: Uuid) -> u64 {
        let token = self.released(gateway);
        token.cancel();
        // Less this function's own handle and the map's.
        Arc::strong_count(&token).saturating_sub(2) as u64
    }

    /// Forgets bells and gateways (and polls) nobody holds, and hand-outs older than
    /// [`HANDED_KEPT`].
    pub fn prune(&self) {
        self.handed
            .lock()
            .expect("the wake map is never poisoned")
            .retain(|_, (_, at)| at.elapsed() < HANDED_KEPT);
        self.waiting
            .lock()
            .expect("the wake map is never poisoned")
            .retain(|_, bell| Arc::strong_count(bell) > 1);
        self.gateways
            .lock()
            .expect("the wake map is never poisoned")
            .retain(|_, token| Arc::strong_count(token) > 1);
    }

    /// Listens for queued jobs until `shutdown`, reconnecting when the connection drops.
    pub async fn listen(
        self: Arc<Self>,
        store: Store,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        while !shutdown.is_cancelled() {
            let mut listener = match store.listener().await {
                Ok(listener) => listener,
                Err(error) => {
                    warn!(%error, "job wake-up listener cannot connect, retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if let Err(error) = listener.listen(CHANNEL).await {
                warn!(%error, "job wake-up listener cannot listen, retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            loop {
                let notification = tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    notification = listener.recv() => notification,
                };
                match notification {
                    Ok(notification) => {
                        if let Ok(node_id) = notification.payload().parse::<NodeId>() {
                            self.ring(node_id);
                        }
                    }
                    Err(error) => {
                        warn!(%error, "job wake-up listener lost its connection");
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_job_queued_before_the_claim_arms_its_bell_is_not_slept_through() {
        let wake = Wake::default();
        // The claim's first read: no job yet.
        let before = wake.generation();
        // The job is queued and rung before the claim holds a bell: nobody is woken...
        wake.ring(NodeId(7));
        let bell = wake.bell(NodeId(7));
        let rung = bell.notified();
        tokio::pin!(rung);
        rung.as_mut().enable();
        // ...but the claim, bell armed, sees a ring since its read and looks again.
        assert!(wake.rung_since(before));
        // With nothing rung since, its read stands and it sleeps until the bell rings.
        let armed = wake.generation();
        assert!(!wake.rung_since(armed));
        wake.ring(NodeId(7));
        tokio::time::timeout(Duration::from_secs(1), rung)
            .await
            .expect("the armed bell wakes the claim");
    }

    // The intake's and the slots' wait: a node with work does not wait, and one rung for while
    // it waits stops waiting; a quiet node's wait ends only with what it waited for.
    #[tokio::test]
    async fn a_wait_ends_when_its_node_has_work_or_is_rung_for_and_otherwise_runs_out() {
        use futures::FutureExt;
        use std::task::Poll;
        let wake = Wake::default();
        let never = || std::future::pending::<()>();
        wake.expect_work([NodeId(1)]);
        assert_eq!(
            wake.until_work(NodeId(1), never()).now_or_never(),
            Some(None),
            "work waits already: no wait"
        );

        let waiting = wake.until_work(NodeId(2), never());
        tokio::pin!(waiting);
        assert!(
            futures::poll!(&mut waiting).is_pending(),
            "a quiet node waits"
        );
        wake.ring(NodeId(3));
        assert!(
            futures::poll!(&mut waiting).is_pending(),
            "another node's ring does not end it"
        );
        wake.ring(NodeId(2));
        assert_eq!(
            futures::poll!(&mut waiting),
            Poll::Ready(None),
            "rung for while it waits"
        );

        assert_eq!(
            wake.until_work(NodeId(4), async { "a permit" })
                .now_or_never(),
            Some(Some("a permit")),
            "a quiet node's wait ends with what it waited for"
        );
    }

    #[tokio::test]
    async fn releasing_a_gateway_ends_its_long_polls_and_no_others() {
        let wake = Wake::default();
        let (stopping, staying) = (Uuid::now_v7(), Uuid::now_v7());
        let held = wake.released(stopping);
        let other = wake.released(staying);
        assert_eq!(wake.release(stopping), 1, "one long poll was waiting");
        tokio::time::timeout(Duration::from_secs(1), held.cancelled())
            .await
            .expect("the released long poll ends");
        assert!(!other.is_cancelled());
        // A claim forwarded by the stopped gateway after its release is not held either.
        assert!(wake.released(stopping).is_cancelled());
    }

    // Issue 10: a claim whose agent hung up leaves the queue. Releasing its poll ends that claim
    // alone, and a release that comes before the claim is held ends it as it arrives.
    #[tokio::test]
    async fn releasing_a_poll_ends_that_claim_alone_even_before_it_is_held() {
        let wake = Wake::default();
        let gateway = Uuid::now_v7();
        let (hung_up, waiting) = (Uuid::now_v7(), Uuid::now_v7());
        let held = wake.released_for(Some(gateway), Some(hung_up));
        let other = wake.released_for(Some(gateway), Some(waiting));
        assert_eq!(wake.release(hung_up), 1);
        tokio::time::timeout(Duration::from_secs(1), held.cancelled())
            .await
            .expect("the released poll ends");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), other.cancelled())
                .await
                .is_err(),
            "the other poll of the same gateway is still held"
        );
        let early = Uuid::now_v7();
        assert_eq!(wake.release(early), 0);
        tokio::time::timeout(
            Duration::from_secs(1),
            wake.released_for(Some(gateway), Some(early)).cancelled(),
        )
        .await
        .expect("a claim released before it was held ends at once");
        // The gateway's stop still ends every one of its polls.
        assert_eq!(wake.release(gateway), 2);
        tokio::time::timeout(Duration::from_secs(1), other.cancelled())
            .await
            .expect("the gateway's stop ends it");
    }

    // A claim the gateway gave up on (or whose agent hung up) hands its job back exactly once:
    // a release after the hand-out names the job; a hand-out after the release is refused,
    // and the claim gives it back itself. (Fails when a late release forgets the hand-out.)
    #[test]
    fn a_released_poll_hands_back_its_job_once_whichever_comes_first() {
        let wake = Wake::default();
        let (late, early, kept) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let _held = wake.released_for(None, Some(late));
        assert!(
            !wake.handed_out(late, 41),
            "the answer may still reach its agent"
        );
        assert_eq!(wake.release_poll(late), (1, Some(41)));
        assert_eq!(wake.release_poll(late), (1, None), "named once");
        assert_eq!(wake.release_poll(early), (0, None));
        assert!(wake.handed_out(early, 42), "released before it handed out");
        assert_eq!(wake.release_poll(early), (0, None), "and not named again");
        assert!(!wake.handed_out(kept, 43));
        wake.prune();
        assert_eq!(
            wake.handed.lock().unwrap().len(),
            1,
            "a fresh hand-out is kept"
        );
    }

    #[test]
    fn a_bell_nobody_holds_is_pruned() {
        let wake = Wake::default();
        let held = wake.bell(NodeId(1));
        drop(wake.bell(NodeId(2)));
        wake.prune();
        let waiting = wake.waiting.lock().unwrap();
        assert!(waiting.contains_key(&NodeId(1)) && !waiting.contains_key(&NodeId(2)));
        drop(held);
    }

    // A claim that looks and finds no job takes its node out of the set, but not when the node
    // was rung for after the look began: that job may have committed after the read.
    #[test]
    fn a_node_leaves_the_work_set_only_by_a_look_taken_after_its_last_ring() {
        let wake = Wake::default();
        assert!(!wake.has_work(NodeId(3)));
        wake.ring(NodeId(3));
        assert!(wake.has_work(NodeId(3)), "rung for a job");
        let before_look = wake.generation();
        wake.ring(NodeId(3));
        wake.settle(NodeId(3), before_look, false);
        assert!(wake.has_work(NodeId(3)), "rung again after the look began");
        let after = wake.generation();
        wake.settle(NodeId(3), after, false);
        assert!(
            !wake.has_work(NodeId(3)),
            "a look after every ring found nothing"
        );
        wake.settle(NodeId(4), wake.generation(), true);
        assert!(
            wake.has_work(NodeId(4)),
            "a look found a job nobody rang for"
        );
        wake.expect_work([NodeId(5)]);
        assert!(
            wake.has_work(NodeId(5)),
            "queued before this replica started"
        );
    }
}
