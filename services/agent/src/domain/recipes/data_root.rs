//! AG-55: neither `service_health` nor `container_health` repairs while the data root is
//! stopped (host_report's `data_root_stopped`).
//!
//! What the data root is here: the filesystem the site's data lives on — PostgreSQL's data
//! directory, the uploads — mounted at the path the node's own configuration names
//! (`CAPSTAN_AGENT_DATA_ROOT`, for example `/srv/data`; unset, there is none and nothing is
//! gated). It is *stopped* when that path is not a mount point in `/proc/self/mountinfo`: a
//! person unmounted it or stopped its mount unit (or it failed to mount at boot). What lives
//! on it is down on purpose, and restarting PostgreSQL or a site container would start it on
//! the empty directory underneath, or pull the mount back in through the unit's
//! `RequiresMountsFor=`. So while it is stopped a failing check of those recipes is
//! *unknown* — it never repairs, never counts toward the two-tick gate or the budget, and
//! opens no case (AG-41) — and says why.

use super::{Check, Verdict};

/// The recipes AG-55 stops from repairing while the data root is stopped.
pub const GATED: &[&str] = &["service_health", "container_health"];

/// The data root as the node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataRoot {
    /// No data root is configured: nothing is gated.
    NotConfigured,
    Mounted(String),
    /// Configured and not mounted.
    Stopped(String),
    /// The mount table cannot be read.
    Unknown(String),
}

impl DataRoot {
    /// host_report's `data_root_stopped`: true, false, or null when it cannot be told.
    pub fn stopped(&self) -> Option<bool> {
        match self {
            DataRoot::NotConfigured | DataRoot::Mounted(_) => Some(false),
            DataRoot::Stopped(_) => Some(true),
            DataRoot::Unknown(_) => None,
        }
    }

    pub fn state(&self) -> &'static str {
        match self {
            DataRoot::NotConfigured => "not configured",
            DataRoot::Mounted(_) => "mounted",
            DataRoot::Stopped(_) => "stopped",
            DataRoot::Unknown(_) => "unknown",
        }
    }
}

/// Undoes the kernel's octal escapes in a mountinfo path (`\040` is a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let value = digits
                    .iter()
                    .fold(0u32, |value, digit| value * 8 + u32::from(digit - b'0'));
                if let Ok(value) = u8::try_from(value) {
                    out.push(value);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `path` is a mount point in a `/proc/self/mountinfo` text (its fifth field).
pub fn is_mount_point(mountinfo: &str, path: &str) -> bool {
    let wanted = path.trim_end_matches('/');
    let wanted = if wanted.is_empty() { "/" } else { wanted };
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|point| unescape(point) == wanted)
}

/// The data root at `path` (if configured), from the mount table's text or why it could not
/// be read.
pub fn judge(path: Option<&str>, mountinfo: Result<&str, &dyn std::fmt::Display>) -> DataRoot {
    let Some(path) = path else {
        return DataRoot::NotConfigured;
    };
    match mountinfo {
        Err(why) => DataRoot::Unknown(format!("the mount table cannot be read: {why}")),
        Ok(text) if is_mount_point(text, path) => DataRoot::Mounted(path.to_string()),
        Ok(_) => DataRoot::Stopped(path.to_string()),
    }
}

/// AG-55: a gated recipe's failing check, while the data root is stopped, is unknown and has
/// no target: nothing is repaired and nothing counts. Anything else is the check as it was.
pub fn gate(recipe: &str, check: Check, data_root: &DataRoot) -> Check {
    let DataRoot::Stopped(path) = data_root else {
        return check;
    };
    if !GATED.contains(&recipe) || check.verdict != Verdict::Fail {
        return check;
    }
    Check::unknown(format!(
        "{}; and the data root {path} is stopped (not mounted), so what is on it is down on purpose and {recipe} repairs nothing until it is mounted again",
        check.detail
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
31 22 8:17 / /srv/data rw,relatime shared:9 - ext4 /dev/sdb1 rw
32 22 8:33 / /mnt/with\\040space rw,relatime shared:10 - ext4 /dev/sdc1 rw
";

    #[test]
    fn ag_55_a_data_root_is_stopped_when_it_is_not_a_mount_point() {
        assert!(is_mount_point(MOUNTINFO, "/srv/data"));
        assert!(is_mount_point(MOUNTINFO, "/srv/data/"));
        assert!(is_mount_point(MOUNTINFO, "/mnt/with space"));
        assert!(!is_mount_point(MOUNTINFO, "/srv"));
        assert_eq!(
            judge(Some("/srv/data"), Ok(MOUNTINFO)),
            DataRoot::Mounted("/srv/data".into())
        );
        let unmounted = MOUNTINFO.replace("/srv/data", "/srv/other");
        let stopped = judge(Some("/srv/data"), Ok(&unmounted));
        assert_eq!(stopped, DataRoot::Stopped("/srv/data".into()));
        assert_eq!(stopped.stopped(), Some(true));
        assert_eq!(judge(None, Ok(MOUNTINFO)).stopped(), Some(false));
        assert_eq!(judge(Some("/srv/data"), Err(&"denied")).stopped(), None);
    }

    #[test]
    fn ag_55_service_health_and_container_health_repair_nothing_while_the_data_root_is_stopped() {
        let stopped = DataRoot::Stopped("/srv/data".into());
        for recipe in ["service_health", "container_health"] {
            let check = gate(
                recipe,
                Check::fail("PostgreSQL is down").targeting("postgresql"),
                &stopped,
            );
            assert_eq!(check.verdict, Verdict::Unknown, "{recipe}");
            assert_eq!(check.target, None);
            assert!(check.detail.contains("PostgreSQL is down"));
            assert!(check.detail.contains("/srv/data is stopped"));
        }
        // A pass stays a pass; other recipes are not gated; a mounted root gates nothing.
        assert_eq!(
            gate("service_health", Check::pass("fine"), &stopped).verdict,
            Verdict::Pass
        );
        assert_eq!(
            gate(
                "fail2ban",
                Check::fail("down").targeting("fail2ban"),
                &stopped
            )
            .verdict,
            Verdict::Fail
        );
        let mounted = DataRoot::Mounted("/srv/data".into());
        assert_eq!(
            gate("service_health", Check::fail("down"), &mounted).verdict,
            Verdict::Fail
        );
    }
}
