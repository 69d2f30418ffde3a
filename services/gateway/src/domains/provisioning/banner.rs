//! The dashboard's banner of provisions in flight (PV-03: "In-flight provisions show in a
//! dashboard banner"): those of the Main | Test tab last chosen (PV-13; Main until one is), each
//! with its step and a link to its page, and how many are in flight under the other tab. The
//! dashboard asks for it with a short wait: a slow or absent provisioning service leaves the
//! banner out rather than holding the page.

use axum::http::HeaderMap;
use capstan_events::provisioning::{
    provisions::{ListProvisions, Provisions},
    AccountFlag,
};
use capstan_events::Word as _;
use std::str::FromStr;
use std::time::Duration;

use super::{flag_words, provisions::Row};
use crate::{
    state::AppState,
    ui::{cookies, UiSession},
};

/// The longest the dashboard waits for the banner.
const BANNER_WAIT: Duration = Duration::from_millis(1500);

/// The most provisions the banner names (the rest are on the provisions page).
const BANNER_ROWS: usize = 10;

/// What the dashboard draws of provisions in flight (nothing, when none are).
#[derive(Default)]
pub struct Banner {
    pub rows: Vec<Row>,
    /// In flight under this tab beyond those named.
    pub more: usize,
    pub tab: &'static str,
    pub tab_words: &'static str,
    pub other: &'static str,
    pub other_words: &'static str,
    /// In flight under the other tab.
    pub other_count: usize,
}

impl Banner {
    pub fn shown(&self) -> bool {
        !self.rows.is_empty() || self.other_count > 0
    }
}

/// The banner from the provisions in flight, for the tab `tab`.
fn banner_of(in_flight: Provisions, tab: AccountFlag) -> Banner {
    let (mine, others): (Vec<_>, Vec<_>) = in_flight
        .provisions
        .into_iter()
        .partition(|provision| provision.flag == tab);
    let other = match tab {
        AccountFlag::Main => AccountFlag::Test,
        AccountFlag::Test => AccountFlag::Main,
    };
    Banner {
        rows: mine
            .iter()
            .take(BANNER_ROWS)
            .map(super::provisions::row)
            .collect(),
        more: mine.len().saturating_sub(BANNER_ROWS),
        tab: tab.as_str(),
        tab_words: flag_words(tab),
        other: other.as_str(),
        other_words: flag_words(other),
        other_count: others.len(),
    }
}

/// The banner for the signed-in operator, or an empty one when there is nothing in flight or
/// no answer in time.
pub async fn banner(state: &AppState, session: &UiSession, headers: &HeaderMap) -> Banner {
    let tab = cookies::read(headers, cookies::ACCOUNT_TAB_COOKIE)
        .and_then(|value| AccountFlag::from_str(&value).ok())
        .unwrap_or(AccountFlag::Main);
    let request = ListProvisions {
        actor: session.actor(),
        flag: None,
        in_flight: true,
    };
    match state
        .bus
        .ask(&request, BANNER_WAIT.min(state.rpc_timeout))
        .await
    {
        Ok(in_flight) => banner_of(in_flight, tab),
        Err(error) => {
            tracing::debug!(error = %error.message, "no provisioning banner for this page");
            Banner::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::provisioning::{
        provisions::ProvisionView, CloudProvider, InstallKind, ProvisionStep,
    };

    fn in_flight(id: i64, flag: AccountFlag) -> ProvisionView {
        let at = chrono::Utc::now();
        ProvisionView {
            id,
            account_id: 1,
            account_label: "ours".into(),
            provider: CloudProvider::Hetzner,
            flag,
            kind: InstallKind::Agent,
            name: format!("box-{id}"),
            region: "fsn1".into(),
            size: "cx22".into(),
            image: "debian-12".into(),
            step: ProvisionStep::Booting,
            step_since: at,
            failure: None,
            retries: 0,
            instance_id: None,
            ipv4: vec![],
            ipv6: vec![],
            node_id: None,
            expected_key: None,
            password_retired: false,
            steps: vec![],
            install_log: String::new(),
            approval: None,
            requested_by: "ada".into(),
            requested_at: at,
        }
    }

    #[test]
    fn pv_13_the_banner_names_the_tabs_provisions_and_counts_the_other_tabs() {
        let mut provisions: Vec<ProvisionView> = (1..=12)
            .map(|id| in_flight(id, AccountFlag::Test))
            .collect();
        provisions.push(in_flight(20, AccountFlag::Main));
        let banner = banner_of(Provisions { provisions }, AccountFlag::Test);
        assert_eq!(banner.rows.len(), BANNER_ROWS);
        assert_eq!(banner.more, 2);
        assert_eq!((banner.tab, banner.other), ("test", "main"));
        assert_eq!(banner.other_count, 1);
        assert!(banner.shown());
        let quiet = banner_of(
            Provisions {
                provisions: Vec::new(),
            },
            AccountFlag::Main,
        );
        assert!(!quiet.shown());
    }
}
