//! Every message the plane publishes, with the JSON Schema of its `data`. The docs under
//! `docs/events/` are generated from this list by a test that fails when they drift.

use crate::conditions::ConditionKind;
use crate::Word as _;
use crate::{agent_channel, gateway, incidents, monitor, rollouts, Kind, Message};

/// Every condition the plane's services judge (`conditions.rs`), each declared in its domain's
/// contract module. A new producer adds its kinds here, as it adds its messages below.
pub const CONDITIONS: &[ConditionKind] = &[
    monitor::SITE_DOWN,
    monitor::CERT_PROBLEM,
    crate::backups::BACKUP_FAILED,
    crate::backups::BACKUPS_STOPPED,
    crate::backups::BACKUP_UNVERIFIED,
    agent_channel::AGENT_UPDATE_REFUSED,
    agent_channel::UNMANAGEABLE,
    crate::provisioning::machines::MACHINE_TRANSFER,
    crate::provisioning::machines::TEST_CLOUD_CLEANUP,
    crate::provisioning::provisions::SECOND_JOIN,
];

/// The declared condition named `name`, if any.
pub fn condition_kind(name: &str) -> Option<&'static ConditionKind> {
    CONDITIONS.iter().find(|kind| kind.name == name)
}

/// One message in the catalog.
#[derive(Debug, Clone)]
pub struct Entry {
    pub subject: String,
    pub event_type: String,
    pub kind: Kind,
    pub stream: String,
    pub dataversion: u32,
    /// The JSON Schema (2020-12) of the message's `data`.
    pub schema: serde_json::Value,
}

impl Entry {
    fn of<M: Message>() -> Entry {
        Entry {
            subject: M::subject(),
            event_type: M::event_type(),
            kind: M::KIND,
            stream: M::stream(),
            dataversion: M::VERSION,
            schema: serde_json::to_value(schemars::schema_for!(M))
                .expect("a schema serialises to JSON"),
        }
    }

    /// Conditions (`conditions.rs`): one type on every domain's `capstan.conditions.<domain>.<name>`.
    fn condition() -> Entry {
        Entry {
            subject: format!("{}.conditions.<domain>.<name>", crate::SUBJECT_ROOT),
            event_type: crate::conditions::EVENT_TYPE.to_string(),
            kind: Kind::Event,
            stream: crate::conditions::STREAM.to_string(),
            dataversion: crate::conditions::VERSION,
            schema: serde_json::to_value(schemars::schema_for!(
                crate::conditions::ConditionChanged
            ))
            .expect("a schema serialises to JSON"),
        }
    }

    /// `capstan.agent_channel.job_finished.v1.json`
    pub fn schema_file(&self) -> String {
        format!("{}.v{}.json", self.event_type, self.dataversion)
    }
}

/// Every event and command, events first, each group in subject order.
pub fn entries() -> Vec<Entry> {
    use agent_channel::*;
    let mut entries = vec![
        Entry::of::<JoinRequested>(),
        Entry::of::<NodeApproved>(),
        Entry::of::<JoinRejected>(),
        Entry::of::<NodeDisconnected>(),
        Entry::of::<NodeLeft>(),
        Entry::of::<NodeReported>(),
        Entry::of::<NodesSeen>(),
        Entry::of::<PlacementChanged>(),
        Entry::of::<JobQueued>(),
        Entry::of::<JobClaimed>(),
        Entry::of::<JobFinished>(),
        Entry::of::<RequestJob>(),
        Entry::of::<CancelJob>(),
        Entry::of::<gateway::OperatorChanged>(),
        Entry::of::<incidents::IncidentOpened>(),
        Entry::of::<incidents::IncidentReopened>(),
        Entry::of::<incidents::IncidentCleared>(),
        Entry::of::<incidents::IncidentTriaged>(),
        Entry::of::<monitor::SiteDown>(),
        Entry::of::<monitor::SiteUp>(),
        Entry::of::<monitor::CertProblemChanged>(),
        Entry::of::<monitor::HealthChanged>(),
        Entry::of::<rollouts::ReleasePublished>(),
        Entry::of::<rollouts::RolloutStarted>(),
        Entry::of::<rollouts::RolloutStepFinished>(),
        Entry::of::<rollouts::RolloutHalted>(),
        Entry::of::<rollouts::RolloutFinished>(),
        Entry::of::<crate::backups::TargetChanged>(),
        Entry::of::<crate::backups::RunFinished>(),
        Entry::of::<crate::backups::Verified>(),
        Entry::of::<crate::backups::Pruned>(),
        Entry::of::<crate::backups::HealthChanged>(),
        Entry::of::<crate::provisioning::ProvisionRequested>(),
        Entry::of::<crate::provisioning::InstanceRunning>(),
        Entry::of::<crate::provisioning::InstallStateChanged>(),
        Entry::of::<crate::provisioning::InstallFailed>(),
        Entry::of::<crate::provisioning::JoinAutoApproved>(),
        Entry::of::<crate::provisioning::MachineAdopted>(),
        Entry::condition(),
    ];
    entries.sort_by_key(|entry| (entry.kind == Kind::Command, entry.subject.clone()));
    entries
}

/// The files of `docs/events/`: one schema per message and a `README.md` listing them all.
pub fn render_docs() -> Vec<(String, String)> {
    let entries = entries();
    let mut files = Vec::new();
    let mut page = String::from(
        "# Events and commands\n\n\
         Generated from `libs/events` by `cargo test -p capstan-events` (the test fails when \
         this folder drifts from the code; run it with `CAPSTAN_WRITE_DOCS=1` to rewrite it).\n\n\
         Every message is a CloudEvents 1.0 event in structured JSON mode; the schema below is \
         that of its `data` at the given `dataversion`. Events are public facts (add fields, \
         never rename or repurpose); commands are consumed only by the owning service. Another \
         service sends a command on the subject with its own domain appended \
         (`.<sender>`, such as `capstan.cmd.agent_channel.request_job.monitor`): its bus user \
         may publish no other, and the owner holds it to what that sender may ask (the \
         agent channel: the words the primitives catalog names for it, `issuer`).\n\n\
         | kind | subject | type | stream | dataversion | schema |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for entry in &entries {
        let kind = match entry.kind {
            Kind::Event => "event",
            Kind::Command => "command",
        };
        let sender = match entry.kind {
            Kind::Event => "",
            Kind::Command => ".<sender>",
        };
        page.push_str(&format!(
            "| {kind} | `{}{sender}` | `{}` | `{}` | {} | [{file}]({file}) |\n",
            entry.subject,
            entry.event_type,
            entry.stream,
            entry.dataversion,
            file = entry.schema_file(),
        ));
        let mut schema =
            serde_json::to_string_pretty(&entry.schema).expect("a schema serialises to JSON");
        schema.push('\n');
        files.push((entry.schema_file(), schema));
    }
    page.push_str(
        "\n## Conditions\n\n\
         A service judges its own conditions and publishes each change as \
         `capstan.conditions.changed` on `capstan.conditions.<domain>.<name>` (stream \
         `CAPSTAN_CONDITIONS`; a domain may publish only its own). Incidents reads them all \
         through one durable consumer and shows each as `plane:<name>`.\n\n\
         | source | published by | severity | title |\n\
         | --- | --- | --- | --- |\n",
    );
    for kind in CONDITIONS {
        page.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            kind.source(),
            kind.domain.as_str(),
            kind.severity.as_str(),
            kind.title,
        ));
    }
    files.push(("README.md".to_string(), page));
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn every_subject_in_the_catalog_is_unique() {
        let entries = entries();
        let mut subjects: Vec<_> = entries.iter().map(|entry| &entry.subject).collect();
        subjects.dedup();
        assert_eq!(subjects.len(), entries.len());
    }

    /// The published schemas are a contract: this fails when `docs/events/` no longer says
    /// what the code sends. `CAPSTAN_WRITE_DOCS=1` rewrites the folder.
    #[test]
    fn docs_events_match_the_code() {
        let folder = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/events");
        let write = std::env::var_os("CAPSTAN_WRITE_DOCS").is_some();
        let mut drifted = Vec::new();
        let files = render_docs();
        for (name, contents) in &files {
            let path = folder.join(name);
            let current = std::fs::read_to_string(&path).unwrap_or_default();
            if current != *contents {
                drifted.push(name.clone());
                if write {
                    std::fs::create_dir_all(&folder).unwrap();
                    std::fs::write(&path, contents).unwrap();
                }
            }
        }
        for stale in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let name = stale.file_name().to_string_lossy().to_string();
            if !files.iter().any(|(file, _)| *file == name) {
                drifted.push(format!("{name} (no longer in the catalog)"));
                if write {
                    std::fs::remove_file(stale.path()).unwrap();
                }
            }
        }
        assert!(
            write || drifted.is_empty(),
            "docs/events drifted from libs/events: {drifted:?}; run \
             `CAPSTAN_WRITE_DOCS=1 cargo test -p capstan-events` and commit the result"
        );
    }
}
