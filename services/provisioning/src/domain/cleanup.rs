//! The test-cloud cleanup's rules (PV-55): "per test-flagged account ... delete servers and
//! unattached volumes older than `server_manager_test_cloud_max_age_hours` (24). Only when the
//! provider's account company name is exactly "Joinery Test disposable" ...; otherwise delete
//! nothing, record the refusal, and open `plane:test_cloud_cleanup`. Never delete anything
//! tagged `keep` (any case) or a server at a live node's address (listed as held). No setting
//! can mark an account disposable."

use std::net::IpAddr;

use capstan_events::provisioning::AccountFlag;
use chrono::{DateTime, Duration, Utc};

/// The company name that marks a provider account disposable. A constant, not a setting: no
/// setting can mark an account disposable.
pub const DISPOSABLE_MARKER: &str = "Joinery Test disposable";
/// The default age past which a test server or volume is deleted, in hours.
pub const DEFAULT_MAX_AGE_HOURS: u32 = 24;
/// The tag that keeps anything, compared in any case.
pub const KEEP_TAG: &str = "keep";

/// A server in the account, as the provider lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub id: String,
    pub created_at: DateTime<Utc>,
    pub tags: Vec<String>,
    pub addresses: Vec<IpAddr>,
}

/// A volume in the account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub id: String,
    pub created_at: DateTime<Utc>,
    pub tags: Vec<String>,
    pub attached: bool,
}

/// Why nothing at all is deleted in an account.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CleanupRefusal {
    #[error("the account is flagged main; only a test-flagged account is cleaned")]
    NotTestAccount,
    #[error("the provider's company name is {found:?}, not exactly {DISPOSABLE_MARKER:?}")]
    NotDisposable { found: String },
}

/// Why one thing is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Tagged,
    LiveNode(IpAddr),
    Young,
    Attached,
}

/// What one pass deletes and keeps in an account.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub delete_servers: Vec<String>,
    pub delete_volumes: Vec<String>,
    /// Servers and volumes kept, with why (a live node's server is listed as held).
    pub held: Vec<(String, Held)>,
}

fn kept(tags: &[String]) -> bool {
    tags.iter()
        .any(|tag| tag.trim().eq_ignore_ascii_case(KEEP_TAG))
}

/// The account may be cleaned at all.
pub fn account_disposable(flag: AccountFlag, company_name: &str) -> Result<(), CleanupRefusal> {
    if flag != AccountFlag::Test {
        return Err(CleanupRefusal::NotTestAccount);
    }
    // Exactly: no trimming, no case folding.
    if company_name != DISPOSABLE_MARKER {
        return Err(CleanupRefusal::NotDisposable {
            found: company_name.to_string(),
        });
    }
    Ok(())
}

/// One account's pass: refused as a whole, or what is deleted and what is held.
pub fn plan(
    flag: AccountFlag,
    company_name: &str,
    servers: &[Server],
    volumes: &[Volume],
    live_addresses: &[IpAddr],
    now: DateTime<Utc>,
    max_age: Duration,
) -> Result<Plan, CleanupRefusal> {
    account_disposable(flag, company_name)?;
    let old = |created: DateTime<Utc>| now - created > max_age;
    let mut plan = Plan::default();
    for server in servers {
        let live = server
            .addresses
            .iter()
            .find(|address| live_addresses.contains(address));
        let held = if kept(&server.tags) {
            Some(Held::Tagged)
        } else if let Some(address) = live {
            Some(Held::LiveNode(*address))
        } else if !old(server.created_at) {
            Some(Held::Young)
        } else {
            None
        };
        match held {
            Some(why) => plan.held.push((server.id.clone(), why)),
            None => plan.delete_servers.push(server.id.clone()),
        }
    }
    for volume in volumes {
        let held = if kept(&volume.tags) {
            Some(Held::Tagged)
        } else if volume.attached {
            Some(Held::Attached)
        } else if !old(volume.created_at) {
            Some(Held::Young)
        } else {
            None
        };
        match held {
            Some(why) => plan.held.push((volume.id.clone(), why)),
            None => plan.delete_volumes.push(volume.id.clone()),
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 7, 12, 0, 0).unwrap()
    }

    fn hours_ago(hours: i64) -> DateTime<Utc> {
        now() - Duration::hours(hours)
    }

    fn server(id: &str, age: i64, tags: &[&str], address: &str) -> Server {
        Server {
            id: id.into(),
            created_at: hours_ago(age),
            tags: tags.iter().map(|tag| tag.to_string()).collect(),
            addresses: vec![address.parse().unwrap()],
        }
    }

    fn max_age() -> Duration {
        Duration::hours(i64::from(DEFAULT_MAX_AGE_HOURS))
    }

    #[test]
    fn pv_55_only_a_test_account_named_exactly_the_disposable_marker_is_cleaned() {
        assert_eq!(
            account_disposable(AccountFlag::Main, DISPOSABLE_MARKER),
            Err(CleanupRefusal::NotTestAccount)
        );
        for near in [
            "joinery test disposable",
            "Joinery Test disposable ",
            "Joinery Test",
            "",
        ] {
            assert!(
                account_disposable(AccountFlag::Test, near).is_err(),
                "{near:?}"
            );
        }
        assert_eq!(
            account_disposable(AccountFlag::Test, DISPOSABLE_MARKER),
            Ok(())
        );
        let refused = plan(
            AccountFlag::Test,
            "Acme Ltd",
            &[server("1", 100, &[], "203.0.113.1")],
            &[],
            &[],
            now(),
            max_age(),
        );
        assert!(refused.is_err(), "nothing is deleted under another name");
    }

    #[test]
    fn pv_55_old_servers_go_but_keep_in_any_case_live_nodes_and_young_ones_are_held() {
        let servers = [
            server("old", 30, &["ci"], "203.0.113.1"),
            server("kept", 30, &["KeEp"], "203.0.113.2"),
            server("live", 30, &[], "203.0.113.3"),
            server("young", 2, &[], "203.0.113.4"),
        ];
        let live = ["203.0.113.3".parse().unwrap()];
        let plan = plan(
            AccountFlag::Test,
            DISPOSABLE_MARKER,
            &servers,
            &[],
            &live,
            now(),
            max_age(),
        )
        .unwrap();
        assert_eq!(plan.delete_servers, ["old"]);
        assert_eq!(
            plan.held,
            [
                ("kept".to_string(), Held::Tagged),
                ("live".to_string(), Held::LiveNode(live[0])),
                ("young".to_string(), Held::Young),
            ]
        );
    }

    #[test]
    fn pv_55_only_old_unattached_untagged_volumes_are_deleted() {
        let volume = |id: &str, age: i64, tags: &[&str], attached: bool| Volume {
            id: id.into(),
            created_at: hours_ago(age),
            tags: tags.iter().map(|tag| tag.to_string()).collect(),
            attached,
        };
        let volumes = [
            volume("loose", 48, &[], false),
            volume("attached", 48, &[], true),
            volume("kept", 48, &["KEEP"], false),
            volume("new", 1, &[], false),
        ];
        let plan = plan(
            AccountFlag::Test,
            DISPOSABLE_MARKER,
            &[],
            &volumes,
            &[],
            now(),
            max_age(),
        )
        .unwrap();
        assert_eq!(plan.delete_volumes, ["loose"]);
        assert_eq!(plan.held.len(), 3);
    }
}
