//! Edge versus direct (MO-11, MO-12): is the site slow, or is the path to it slow? The same
//! requests are timed at the same moment through the site's public name (its edge) and
//! straight at each of the machine's own addresses, the name kept for SNI and `Host`.
//!
//! * Up to [`ROUNDS`] rounds; each sends at once, down every path, a `GET` of [`LOGIN_PATH`]
//!   and a `POST {}` to [`HEARTBEAT_PATH`] (a body that never arrives is a stall of its own).
//! * A request taking [`SLOW`] or more, or with no answer within [`NO_ANSWER`], is a stall; a
//!   429 is the site's own limit, never a stall.
//! * No round starts after [`LAST_ROUND_START`], so a run ends inside [`RUN_LIMIT`].
//! * At most [`RUNS_PER_HOUR`] runs per node an hour.
//! * The verdict: a direct path stalled → "Slow on the server"; the edge stalled and a direct
//!   path answered without stalling → "Slow through the edge, fast direct"; the edge stalled
//!   and no direct path answered → "Slow on the server"; otherwise "No problem seen".

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use capstan_events::monitor::rpc::{EdgePath, EdgePathKind, EdgeVerdict, PresentedCertificate};
use url::Url;

use super::pinning;

/// MO-11: rounds in a run, at most.
pub const ROUNDS: u32 = 20;
/// MO-11: a request taking this long or longer is a stall.
pub const SLOW: Duration = Duration::from_secs(5);
/// MO-11: a request with no answer within this long is a stall, and is given up.
pub const NO_ANSWER: Duration = Duration::from_secs(10);
/// MO-11: no round starts after this long into the run.
pub const LAST_ROUND_START: Duration = Duration::from_secs(45);
/// MO-11: a run ends inside this long (the edge in front of the plane allows 100 s).
pub const RUN_LIMIT: Duration = Duration::from_secs(100);
/// MO-12: runs per node an hour, at most.
pub const RUNS_PER_HOUR: u32 = 10;
/// MO-11: what each round's `GET` asks for.
pub const LOGIN_PATH: &str = "/login";
/// MO-11: what each round's `POST {}` is sent to (refused without a session).
pub const HEARTBEAT_PATH: &str = "/api/v1/action/vault_heartbeat";
/// MO-11: the `POST`'s body.
pub const HEARTBEAT_BODY: &str = "{}";
/// MO-11: how the probe's requests introduce themselves (sites never count it as a visitor).
pub const USER_AGENT: &str = "JoineryEdgeProbe/1";
/// The status a site's own rate limit answers with.
pub const TOO_MANY_REQUESTS: u16 = 429;
/// How many of a node's runs its page lists.
pub const LISTED_PER_NODE: i64 = 10;
/// How long finished runs are kept.
pub const KEPT: chrono::Duration = chrono::Duration::days(30);

/// What one request down one path saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leg {
    /// An HTTP answer with its status, and how long until its status line.
    Answered { status: u16, elapsed: Duration },
    /// Nothing within [`NO_ANSWER`].
    NoAnswer,
    /// No HTTP answer at all: refused, reset, a TLS failure.
    Failed(String),
}

impl Leg {
    /// MO-11: 5 s or more, or nothing within 10 s; a 429 is the site's limit, not a stall.
    pub fn is_stall(&self) -> bool {
        match self {
            Leg::Answered { status, elapsed } => *status != TOO_MANY_REQUESTS && *elapsed >= SLOW,
            Leg::NoAnswer => true,
            Leg::Failed(_) => false,
        }
    }

    /// The time it counts for in the percentiles: an answer's own, a missing answer the whole
    /// [`NO_ANSWER`]; an error is not timed.
    fn timed_ms(&self) -> Option<u32> {
        match self {
            Leg::Answered { elapsed, .. } => Some(millis(*elapsed)),
            Leg::NoAnswer => Some(millis(NO_ANSWER)),
            Leg::Failed(_) => None,
        }
    }
}

fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

/// MO-11: whether round `index` (from 0) may start `elapsed` into the run.
pub fn may_start_round(index: u32, elapsed: Duration) -> bool {
    index < ROUNDS && elapsed < LAST_ROUND_START
}

/// Why an edge comparison cannot run, in the operator's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EdgeRefusal {
    /// MO-12: the node was compared as often as an hour allows (the runs asked for).
    #[error(
        "a node is compared at most {RUNS_PER_HOUR} times an hour; {0} runs were asked for in the last hour"
    )]
    TooOften(u32),
    /// The node's uptime URL gives no site to compare.
    #[error("{0}")]
    NoSite(String),
}

/// MO-12: whether another run may start, with `runs_in_last_hour` already asked for this node;
/// the refusal names the limit.
pub fn may_run(runs_in_last_hour: u32) -> Result<(), EdgeRefusal> {
    if runs_in_last_hour < RUNS_PER_HOUR {
        Ok(())
    } else {
        Err(EdgeRefusal::TooOften(runs_in_last_hour))
    }
}

/// What a run compares: the site's origin (scheme, name, port) from its uptime URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// `https://shop.example:443`-like: no path.
    pub origin: Url,
    pub name: String,
    pub port: u16,
    pub https: bool,
}

/// Reads the site to compare from the node's uptime URL; why not, in words, when it cannot be.
pub fn site(url: Option<&str>) -> Result<Site, EdgeRefusal> {
    let no_site = |why: &str| EdgeRefusal::NoSite(why.to_string());
    let text =
        url.ok_or_else(|| no_site("the node has no site address: set its uptime URL first"))?;
    let url = Url::parse(text)
        .map_err(|error| no_site(&format!("the uptime URL cannot be read: {error}")))?;
    let https = match url.scheme() {
        "https" => true,
        "http" => false,
        other => {
            return Err(no_site(&format!(
                "the uptime URL's scheme {other} is not http or https"
            )))
        }
    };
    let name = url
        .host_str()
        .ok_or_else(|| no_site("the uptime URL names no host"))?
        .to_ascii_lowercase();
    if pinning::literal(&name).is_some() {
        return Err(no_site(&format!(
            "the uptime URL names an address ({name}), not a public name: there is no edge to compare"
        )));
    }
    let port = url
        .port_or_known_default()
        .ok_or_else(|| no_site("the uptime URL names no port"))?;
    let mut origin = url.clone();
    origin.set_path("");
    origin.set_query(None);
    origin.set_fragment(None);
    Ok(Site {
        origin,
        name,
        port,
        https,
    })
}

/// MO-11: the direct paths: each distinct IP literal among the node's reported addresses (its
/// host first, then each public address, IPv4 and IPv6), in order.
pub fn direct_targets(addresses: &[String]) -> Vec<IpAddr> {
    let mut found: Vec<IpAddr> = Vec::new();
    for address in addresses.iter().filter_map(|text| pinning::literal(text)) {
        if !found.contains(&address) {
            found.push(address);
        }
    }
    found
}

/// The `p`th percentile (nearest rank) of `sorted`.
pub fn percentile(sorted: &[u32], p: u32) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (sorted.len() * p as usize).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// MO-12: one path's requests, summed up.
pub fn summarise(
    kind: EdgePathKind,
    target: String,
    addresses: Vec<String>,
    legs: &[Leg],
    certificate: Option<PresentedCertificate>,
) -> EdgePath {
    let mut times: Vec<u32> = legs.iter().filter_map(Leg::timed_ms).collect();
    times.sort_unstable();
    let mut statuses: BTreeMap<String, u32> = BTreeMap::new();
    let (mut errors, mut rate_limited, mut last_error) = (0, 0, None);
    for leg in legs {
        match leg {
            Leg::Answered { status, .. } => {
                *statuses.entry(status.to_string()).or_default() += 1;
                if *status == TOO_MANY_REQUESTS {
                    rate_limited += 1;
                }
            }
            Leg::NoAnswer => {}
            Leg::Failed(reason) => {
                errors += 1;
                last_error = Some(reason.clone());
            }
        }
    }
    EdgePath {
        kind,
        target,
        addresses,
        requests: legs.len() as u32,
        stalls: legs.iter().filter(|leg| leg.is_stall()).count() as u32,
        p50_ms: percentile(&times, 50),
        p95_ms: percentile(&times, 95),
        statuses,
        errors,
        rate_limited,
        last_error,
        certificate,
    }
}

fn answered(path: &EdgePath) -> u32 {
    path.statuses.values().sum()
}

/// MO-12: the verdict on a run's paths.
pub fn verdict(paths: &[EdgePath]) -> EdgeVerdict {
    let of = |kind| paths.iter().filter(move |path| path.kind == kind);
    let edge_stalled = of(EdgePathKind::Edge).any(|path| path.stalls > 0);
    let direct_stalled = of(EdgePathKind::Direct).any(|path| path.stalls > 0);
    let direct_answered = of(EdgePathKind::Direct).any(|path| answered(path) > 0);
    if direct_stalled {
        EdgeVerdict::SlowOnServer
    } else if edge_stalled && direct_answered {
        EdgeVerdict::SlowThroughEdge
    } else if edge_stalled {
        EdgeVerdict::SlowOnServer
    } else {
        EdgeVerdict::NoProblemSeen
    }
}

/// MO-12: what the verdict alone does not say.
pub fn notes(paths: &[EdgePath]) -> Vec<String> {
    let mut notes = Vec::new();
    let edge_addresses: Vec<&String> = paths
        .iter()
        .filter(|path| path.kind == EdgePathKind::Edge)
        .flat_map(|path| path.addresses.iter())
        .collect();
    let same: Vec<&str> = paths
        .iter()
        .filter(|path| path.kind == EdgePathKind::Direct && edge_addresses.contains(&&path.target))
        .map(|path| path.target.as_str())
        .collect();
    if !same.is_empty() {
        notes.push(format!(
            "The site's public name resolves to the machine itself ({}): the edge and the direct \
             leg took one path, so this run cannot tell them apart.",
            same.join(", ")
        ));
    }
    let limited: u32 = paths.iter().map(|path| path.rate_limited).sum();
    if limited > 0 {
        notes.push(format!(
            "{limited} answers were 429: the site's own per-address limit (the POST legs carry \
             no credential), not a stall."
        ));
    }
    let direct: Vec<&EdgePath> = paths
        .iter()
        .filter(|path| path.kind == EdgePathKind::Direct)
        .collect();
    if !direct.is_empty() && direct.iter().all(|path| answered(path) == 0) {
        notes.push(
            "No direct path answered, so the origin could not be timed on its own.".to_string(),
        );
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, ms: u64) -> Leg {
        Leg::Answered {
            status,
            elapsed: Duration::from_millis(ms),
        }
    }

    fn path(kind: EdgePathKind, target: &str, addresses: &[&str], legs: &[Leg]) -> EdgePath {
        summarise(
            kind,
            target.to_string(),
            addresses.iter().map(|a| a.to_string()).collect(),
            legs,
            None,
        )
    }

    #[test]
    fn mo_11_a_stall_is_five_seconds_or_more_or_no_answer_and_a_429_is_never_one() {
        assert!(!answer(200, 4_999).is_stall());
        assert!(answer(200, 5_000).is_stall());
        assert!(answer(403, 7_000).is_stall());
        assert!(Leg::NoAnswer.is_stall());
        assert!(!answer(429, 9_000).is_stall(), "a 429 is the site's limit");
        assert!(!Leg::Failed("refused".into()).is_stall());
    }

    #[test]
    fn mo_11_no_round_starts_after_45_s_nor_after_20_rounds_so_a_run_ends_inside_100_s() {
        assert!(may_start_round(0, Duration::ZERO));
        assert!(may_start_round(19, Duration::from_secs(44)));
        assert!(!may_start_round(20, Duration::from_secs(1)));
        assert!(!may_start_round(3, Duration::from_secs(45)));
        // the last round starts before 45 s and each of its requests is given up at 10 s
        assert!(LAST_ROUND_START + NO_ANSWER < RUN_LIMIT);
    }

    #[test]
    fn mo_12_at_most_ten_runs_per_node_an_hour() {
        assert!(may_run(0).is_ok());
        assert!(may_run(9).is_ok());
        let refused = may_run(10).unwrap_err();
        assert!(
            refused.to_string().contains("at most 10 times an hour"),
            "{refused}"
        );
    }

    #[test]
    fn mo_12_a_path_counts_stalls_statuses_errors_and_429s_apart_with_p50_and_p95() {
        let mut legs: Vec<Leg> = (1..=18).map(|i| answer(200, i * 10)).collect();
        legs.push(answer(429, 30));
        legs.push(Leg::NoAnswer);
        legs.push(Leg::Failed("connection refused".into()));
        let summed = path(EdgePathKind::Direct, "203.0.113.7", &[], &legs);
        assert_eq!(summed.requests, 21);
        assert_eq!(summed.stalls, 1);
        assert_eq!(summed.errors, 1);
        assert_eq!(summed.rate_limited, 1);
        assert_eq!(summed.statuses["200"], 18);
        assert_eq!(summed.statuses["429"], 1);
        assert_eq!(summed.last_error.as_deref(), Some("connection refused"));
        // 20 timed: 10..180 (18), 30 (the 429), 10 000 (no answer)
        assert_eq!(summed.p50_ms, Some(90));
        assert_eq!(summed.p95_ms, Some(180));
        let none = path(EdgePathKind::Edge, "shop.example", &[], &[]);
        assert_eq!((none.p50_ms, none.p95_ms), (None, None));
    }

    #[test]
    fn mo_12_percentiles_are_nearest_rank() {
        assert_eq!(percentile(&[7], 50), Some(7));
        assert_eq!(percentile(&[1, 2, 3, 4], 50), Some(2));
        assert_eq!(percentile(&[1, 2, 3, 4], 95), Some(4));
        let hundred: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&hundred, 95), Some(95));
    }

    #[test]
    fn mo_12_the_verdict_in_the_specs_words() {
        let fast = [answer(200, 40), answer(403, 60)];
        let stalled = [answer(200, 40), Leg::NoAnswer];
        let limited = [answer(429, 20), answer(429, 25)];
        let refused = [Leg::Failed("refused".into()), Leg::Failed("refused".into())];
        let edge = |legs: &[Leg]| path(EdgePathKind::Edge, "shop.example", &["198.51.100.9"], legs);
        let direct = |legs: &[Leg]| path(EdgePathKind::Direct, "203.0.113.7", &[], legs);
        // the edge stalls, the origin answers fast: the path is slow
        let verdict_of = |paths: &[EdgePath]| verdict(paths).sentence();
        assert_eq!(
            verdict_of(&[edge(&stalled), direct(&fast)]),
            "Slow through the edge, fast direct"
        );
        // 429s are the site's limit, not stalls: still the edge
        assert_eq!(
            verdict_of(&[edge(&stalled), direct(&fast), direct(&limited)]),
            "Slow through the edge, fast direct"
        );
        // the origin stalls too (or alone): the server is slow
        assert_eq!(
            verdict_of(&[edge(&stalled), direct(&stalled)]),
            "Slow on the server"
        );
        assert_eq!(
            verdict_of(&[edge(&fast), direct(&fast), direct(&stalled)]),
            "Slow on the server"
        );
        // the edge stalls and no direct path answers: nothing says the path is to blame
        assert_eq!(
            verdict_of(&[edge(&stalled), direct(&refused)]),
            "Slow on the server"
        );
        assert_eq!(
            verdict_of(&[edge(&fast), direct(&fast), direct(&limited)]),
            "No problem seen"
        );
        assert_eq!(
            verdict_of(&[edge(&fast), direct(&refused)]),
            "No problem seen"
        );
    }

    #[test]
    fn mo_12_notes_name_the_machine_itself_the_sites_limit_and_silent_origins() {
        let fast = [answer(200, 40)];
        let mine = [
            path(EdgePathKind::Edge, "shop.example", &["203.0.113.7"], &fast),
            path(EdgePathKind::Direct, "203.0.113.7", &[], &fast),
        ];
        let notes_of = notes(&mine);
        assert_eq!(notes_of.len(), 1, "{notes_of:?}");
        assert!(notes_of[0].contains("resolves to the machine itself (203.0.113.7)"));
        let fronted = [
            path(EdgePathKind::Edge, "shop.example", &["198.51.100.9"], &fast),
            path(EdgePathKind::Direct, "203.0.113.7", &[], &[answer(429, 5)]),
        ];
        let notes_of = notes(&fronted);
        assert_eq!(notes_of.len(), 1, "{notes_of:?}");
        assert!(notes_of[0].starts_with("1 answers were 429: the site's own per-address limit"));
        let silent = [
            path(EdgePathKind::Edge, "shop.example", &["198.51.100.9"], &fast),
            path(
                EdgePathKind::Direct,
                "203.0.113.7",
                &[],
                &[Leg::Failed("x".into())],
            ),
        ];
        assert!(notes(&silent)[0].starts_with("No direct path answered"));
    }

    #[test]
    fn mo_11_the_direct_paths_are_each_distinct_address_the_node_reported() {
        let addresses = [
            "203.0.113.7".to_string(),
            "2001:db8::7/64".to_string(),
            "203.0.113.7".to_string(),
            "host.example".to_string(),
        ];
        let found: Vec<String> = direct_targets(&addresses)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found, ["203.0.113.7", "2001:db8::7"]);
    }

    #[test]
    fn mo_11_the_site_is_the_uptime_urls_origin_and_must_be_a_name() {
        let read = site(Some("https://Shop.Example/shop?x=1")).unwrap();
        assert_eq!(read.name, "shop.example");
        assert_eq!(read.port, 443);
        assert!(read.https);
        assert_eq!(read.origin.as_str(), "https://shop.example/");
        assert_eq!(site(Some("http://shop.example:8080/")).unwrap().port, 8080);
        assert!(site(None)
            .unwrap_err()
            .to_string()
            .contains("set its uptime URL"));
        assert!(site(Some("http://203.0.113.7/"))
            .unwrap_err()
            .to_string()
            .contains("no edge to compare"));
        assert!(site(Some("ftp://shop.example/"))
            .unwrap_err()
            .to_string()
            .contains("ftp"));
    }
}
