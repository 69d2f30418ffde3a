//! The OpenAPI 3.1 document of the gateway (`GET /api/v1/openapi.json`), kept as a file beside
//! the code. Its paths are written by hand; its component schemas are those of the contract
//! types, and a test fails when either drifts from the code (`CAPSTAN_WRITE_DOCS=1` rewrites
//! the schemas).

use axum::{
    http::header,
    response::{IntoResponse, Response},
};
use capstan_events::agent_channel::rpc::{
    Approved, Done, JobCreated, JobOutput, JobView, Jobs, Joins, NodeView, Nodes, RefusalCount,
};
use schemars::{generate::SchemaSettings, JsonSchema};
use serde_json::{Map, Value};

use crate::{
    domains::agent_channel::api::{ApproveBody, CreateJobBody},
    domains::incidents::api::{
        AlertsBody, NoteBody, Notifications, SilenceBody, TriageBody, WebhookBody,
    },
    error::ErrorBody,
};

/// The document, as served.
pub const DOCUMENT: &str = include_str!("../openapi.json");

pub async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT).into_response()
}

fn generator(settings: SchemaSettings) -> schemars::SchemaGenerator {
    settings
        .with(|settings| {
            settings.definitions_path = "/components/schemas".into();
            settings.meta_schema = None;
        })
        .into_generator()
}

fn add<T: JsonSchema>(generator: &mut schemars::SchemaGenerator) {
    generator.subschema_for::<T>();
}

/// The schemas `components.schemas` must hold: what the gateway answers (as serialised) and
/// the bodies it takes (as parsed), with everything they refer to.
pub fn component_schemas() -> Map<String, Value> {
    let mut answers = generator(SchemaSettings::draft2020_12().for_serialize());
    add::<Joins>(&mut answers);
    add::<Approved>(&mut answers);
    add::<Done>(&mut answers);
    add::<Nodes>(&mut answers);
    add::<NodeView>(&mut answers);
    add::<JobCreated>(&mut answers);
    add::<Jobs>(&mut answers);
    add::<JobView>(&mut answers);
    add::<JobOutput>(&mut answers);
    add::<RefusalCount>(&mut answers);
    add::<ErrorBody>(&mut answers);
    {
        use capstan_events::incidents::rpc as incidents;
        add::<incidents::Incidents>(&mut answers);
        add::<incidents::Header>(&mut answers);
        add::<incidents::IncidentDetail>(&mut answers);
        add::<incidents::Triaged>(&mut answers);
        add::<incidents::Silences>(&mut answers);
        add::<incidents::SilenceView>(&mut answers);
        add::<incidents::Webhooks>(&mut answers);
        add::<incidents::WebhookCreated>(&mut answers);
        add::<incidents::Bell>(&mut answers);
        add::<Notifications>(&mut answers);
    }
    {
        use capstan_events::monitor::rpc as monitor;
        add::<monitor::UptimeChecks>(&mut answers);
        add::<monitor::UptimeDetail>(&mut answers);
        add::<monitor::UptimeCheck>(&mut answers);
        add::<monitor::CertificateView>(&mut answers);
        add::<monitor::FleetSecurity>(&mut answers);
        add::<monitor::EdgeProbeStarted>(&mut answers);
        add::<monitor::EdgeProbeView>(&mut answers);
        add::<monitor::EdgeProbes>(&mut answers);
        use capstan_events::rollouts::rpc as rollouts;
        add::<rollouts::Releases>(&mut answers);
        add::<rollouts::ReleaseView>(&mut answers);
        add::<rollouts::SiteReleases>(&mut answers);
        add::<rollouts::SiteReleaseView>(&mut answers);
        add::<capstan_events::rollouts::staged::Rollouts>(&mut answers);
        add::<capstan_events::rollouts::staged::RolloutView>(&mut answers);
        add::<capstan_events::agent_channel::rpc::FleetVersions>(&mut answers);
        use capstan_events::backups::rpc as backups;
        add::<backups::Targets>(&mut answers);
        add::<backups::TargetView>(&mut answers);
        add::<backups::FleetCoverage>(&mut answers);
        add::<backups::BackupUrlsAnswer>(&mut answers);
        add::<backups::FleetPolicyView>(&mut answers);
        add::<backups::NodePolicyView>(&mut answers);
        add::<backups::NodeBackups>(&mut answers);
        add::<backups::Dispatched>(&mut answers);
    }
    let mut bodies = generator(SchemaSettings::draft2020_12().for_deserialize());
    add::<ApproveBody>(&mut bodies);
    add::<CreateJobBody>(&mut bodies);
    add::<TriageBody>(&mut bodies);
    add::<NoteBody>(&mut bodies);
    add::<SilenceBody>(&mut bodies);
    add::<WebhookBody>(&mut bodies);
    add::<AlertsBody>(&mut bodies);
    add::<crate::domains::monitor::api::UptimeBody>(&mut bodies);
    add::<crate::domains::rollouts::releases_api::ReleaseBody>(&mut bodies);
    add::<crate::domains::rollouts::releases_api::SiteReleaseBody>(&mut bodies);
    add::<crate::domains::rollouts::api::RolloutBody>(&mut bodies);
    add::<crate::domains::backups::api::TargetBody>(&mut bodies);
    add::<capstan_events::backups::rpc::FleetPolicy>(&mut bodies);
    add::<capstan_events::backups::rpc::NodePolicyBody>(&mut bodies);
    add::<crate::domains::backups::api::VerifyBody>(&mut bodies);
    add::<crate::domains::backups::api::RestoreBody>(&mut bodies);
    add::<crate::domains::backups::api::MoveBody>(&mut bodies);
    // A claim's `recipes` entry and `cases` value (the agent route's body is written by hand
    // and refers to these).
    add::<capstan_events::agent_channel::recipes::ReportedRecipe>(&mut bodies);
    add::<capstan_events::agent_channel::recipes::ReportedCase>(&mut bodies);
    let mut schemas = answers.take_definitions(true);
    schemas.extend(bodies.take_definitions(true));
    schemas
}
