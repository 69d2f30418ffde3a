//! What another service has heard, seen from outside it: an event read back from its stream, and
//! the listener's durable consumer of that stream having acknowledged every message the stream
//! holds. A test that must know a service has applied an event (before it asserts that nothing
//! changed, or before it acts on the service's projection) waits for this instead of reading the
//! service's tables.

use capstan_bus::{
    testsuite::{consumer_settled, read_stream},
    Bus,
};
use capstan_events::{Domain, Envelope, Event, RawEnvelope};
use std::time::Duration;

use crate::wait_for;

/// How long a test waits for an event to be published, then for a listener to apply it.
const PATIENCE: Duration = Duration::from_secs(60);

/// Every event `M` its stream holds now, oldest first.
pub async fn events_of<M: Event>(bus: &Bus) -> Vec<Envelope<M>> {
    read_stream(bus, &M::stream(), usize::MAX)
        .await
        .iter()
        .filter_map(|message| RawEnvelope::from_slice(&message.payload).ok())
        .filter_map(|raw| raw.decode::<M>().ok())
        .collect()
}

/// Waits until an event `M` whose data `matches` is in its stream (published, not only written
/// to its service's outbox); the first such event.
pub async fn published<M: Event>(
    bus: &Bus,
    what: &str,
    matches: impl Fn(&M) -> bool,
) -> Envelope<M> {
    wait_for(
        &format!("{what} (a {} event published)", M::NAME),
        PATIENCE,
        || async {
            events_of::<M>(bus)
                .await
                .into_iter()
                .find(|event| matches(&event.data))
        },
    )
    .await
}

/// Waits until an event `M` whose data `matches` is published and `listener` has applied it:
/// every durable consumer `listener` keeps on `M`'s stream has been handed every message the
/// stream holds and acknowledged each. The event.
pub async fn heard<M: Event>(
    bus: &Bus,
    listener: Domain,
    what: &str,
    matches: impl Fn(&M) -> bool,
) -> Envelope<M> {
    let event = published(bus, what, matches).await;
    settled(bus, listener, M::DOMAIN).await;
    event
}

/// Waits until `listener` has applied every event `from`'s stream holds now.
pub async fn settled(bus: &Bus, listener: Domain, from: Domain) {
    let durables: Vec<&str> = listener
        .reach()
        .consumes
        .iter()
        .filter(|subscription| subscription.from == from)
        .map(|subscription| subscription.durable)
        .collect();
    assert!(
        !durables.is_empty(),
        "the {listener} service reads no event of {from}"
    );
    let stream = from.events_stream();
    wait_for(
        &format!("the {listener} service to apply {from}'s events"),
        PATIENCE,
        || async {
            for durable in &durables {
                if !consumer_settled(bus, &stream, durable).await {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}
