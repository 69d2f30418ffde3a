//! Every closed word of the contract is spelled once: the name `strum` derives (`as_str`,
//! `Display`, `FromStr`) is exactly the name serde writes, for every variant.

use capstan_events::{
    agent_channel::{
        recipes::{RecipeHold, RecipeMode},
        rpc::{AgentEndpoint, JobState, PlacementKind},
        JobOutcome, PrimitiveClass,
    },
    backups::{
        rpc::{BackupMode, Position, RunKind, Uncovered},
        Provider, UrlOp,
    },
    incidents::{rpc::WebhookKind, Severity, Status, Triage},
    monitor::{
        rpc::{EdgeProbeStatus, SecurityColour},
        CertReason, CheckKind, HealthDot, UptimeStatus,
    },
    provisioning::{AccountFlag, CloudProvider, InstallKind, InstallState, ProvisionStep},
    rollouts::{
        rpc::{AgentArtifactKind, Arch},
        staged::{RolloutKind, RolloutState, StepPhase, StepVerdict},
    },
    rpc::ErrorCode,
    Domain, Word,
};
use serde::{de::DeserializeOwned, Serialize};
use std::fmt::{Debug, Display};
use strum::IntoEnumIterator;

/// Each variant of `W`: serde's name is `as_str`, `Display` says it too, and both `parse` and
/// serde read it back to the same variant.
fn spelled_once<W>() -> usize
where
    W: Word + IntoEnumIterator + Serialize + DeserializeOwned + Display + Debug + PartialEq,
{
    let mut variants = 0;
    for word in W::iter() {
        let name = word.as_str();
        assert_eq!(
            serde_json::to_value(word).unwrap(),
            serde_json::Value::String(name.into()),
            "{word:?}"
        );
        assert_eq!(word.to_string(), name, "{word:?}");
        assert_eq!(W::parse(name), Some(word), "{word:?}");
        assert_eq!(
            serde_json::from_value::<W>(serde_json::Value::String(name.into())).unwrap(),
            word
        );
        variants += 1;
    }
    assert!(W::parse("no such word").is_none());
    variants
}

#[test]
fn every_word_is_named_as_serde_names_it_and_reads_back() {
    let counted = [
        spelled_once::<PrimitiveClass>(),
        spelled_once::<JobOutcome>(),
        spelled_once::<RecipeMode>(),
        spelled_once::<RecipeHold>(),
        spelled_once::<AgentEndpoint>(),
        spelled_once::<PlacementKind>(),
        spelled_once::<JobState>(),
        spelled_once::<Provider>(),
        spelled_once::<UrlOp>(),
        spelled_once::<BackupMode>(),
        spelled_once::<Position>(),
        spelled_once::<RunKind>(),
        spelled_once::<Uncovered>(),
        spelled_once::<Domain>(),
        spelled_once::<Status>(),
        spelled_once::<Triage>(),
        spelled_once::<Severity>(),
        spelled_once::<WebhookKind>(),
        spelled_once::<CheckKind>(),
        spelled_once::<UptimeStatus>(),
        spelled_once::<CertReason>(),
        spelled_once::<HealthDot>(),
        spelled_once::<SecurityColour>(),
        spelled_once::<EdgeProbeStatus>(),
        spelled_once::<ErrorCode>(),
        spelled_once::<RolloutKind>(),
        spelled_once::<RolloutState>(),
        spelled_once::<StepPhase>(),
        spelled_once::<StepVerdict>(),
        spelled_once::<CloudProvider>(),
        spelled_once::<AccountFlag>(),
        spelled_once::<InstallKind>(),
        spelled_once::<InstallState>(),
        spelled_once::<ProvisionStep>(),
        spelled_once::<AgentArtifactKind>(),
        spelled_once::<Arch>(),
    ];
    assert!(counted.iter().all(|variants| *variants >= 2), "{counted:?}");
}

#[test]
fn a_words_kebab_and_lowercase_names_follow_its_serde_case() {
    assert_eq!(RecipeMode::ReportOnly.as_str(), "report-only");
    assert_eq!(
        RecipeMode::parse("not-applicable"),
        Some(RecipeMode::NotApplicable)
    );
    assert_eq!(RecipeMode::parse("not_applicable"), None);
    assert_eq!(Domain::AgentChannel.as_str(), "agent_channel");
    assert_eq!(ErrorCode::NeedsNewerAgent.to_string(), "needs_newer_agent");
    assert_eq!(InstallKind::DockerHost.as_str(), "docker-host");
    assert_eq!(InstallState::InstallFailed.as_str(), "install_failed");
    assert_eq!(Arch::LinuxArm64.as_str(), "linux-arm64");
    assert_eq!(Arch::ALL.len(), Arch::iter().count());
    assert_eq!(
        AgentArtifactKind::ALL.len(),
        AgentArtifactKind::iter().count()
    );
    assert_eq!(Arch::parse("linux_arm64"), None);
    assert_eq!(
        AgentArtifactKind::parse("release_statement"),
        Some(AgentArtifactKind::ReleaseStatement)
    );
}
