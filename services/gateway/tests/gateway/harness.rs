//! `Gateway::start`: a NATS server, a database, the gateway serving on a free port, and
//! (optionally) a fake agent channel that records what it is asked and answers as told.

use bytes::Bytes;
use capstan_bus::{testsuite::NatsServer, Bus, RpcServer};
use capstan_events::NodeId;
use capstan_events::Word as _;
use capstan_events::{
    agent_channel::{
        rpc::{
            AgentEndpoint, AgentRequest, AgentResponse, ApproveJoin, Approved, CancelJobRequest,
            CreateJob, DisconnectNode, Done, GetJob, GetNode, JobCreated, JobOutput,
            JobOutputRequest, JobState, JobView, Jobs, JoinFilter, JoinState, JoinView, Joins,
            ListJobs, ListJoins, ListNodes, MarkJobFailed, NodeView, Nodes, RefusalCount,
            RefusalCountRequest, RejectJoin, ReopenJoin,
        },
        PrimitiveClass,
    },
    rpc::{JsonRpc, Level, Rpc, RpcError},
    Domain,
};
use capstan_gateway::AppState;
use capstan_store::{testsuite::TestDatabase, Store};
use serde_json::{json, Value};
use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::Duration,
};
use tokio_util::sync::CancellationToken;

/// What the fake agent channel answers, and what it was asked.
#[derive(Default)]
pub struct Script {
    /// When set, every operator op answers this error.
    pub failure: Option<RpcError>,
    /// The answer to `agent_request` (default: 200 `{"ok": true}`).
    pub agent_answer: Option<(AgentResponse, Bytes)>,
    /// Every operator op asked, with its request as JSON.
    pub asked: Vec<(String, Value)>,
    /// Every agent request, with its body.
    pub agent_requests: Vec<(AgentRequest, Bytes)>,
    /// When set, the nodes `list_nodes` and `get_node` answer (default: node 17).
    pub nodes: Option<Vec<NodeView>>,
    /// When set, the pending joins `list_joins` answers (default: one, [`join_view`]).
    pub joins: Option<Vec<JoinView>>,
    /// The joins `list_joins` answers for `rejected` (default: none).
    pub rejected: Vec<JoinView>,
    /// When set, the job `get_job` answers (with the asked id).
    pub job: Option<JobView>,
    /// When set, what the fake backups service's `node_backups` answers (with the asked node).
    pub node_backups: Option<capstan_events::backups::rpc::NodeBackups>,
    /// When set, what its `fleet_coverage` answers (default: target 1 with no nodes).
    pub coverage: Option<capstan_events::backups::rpc::FleetCoverage>,
    /// When set, the seal key `list_targets` reports (default: set, in capstan all's file).
    pub seal_key: Option<capstan_events::backups::rpc::SealKeyView>,
}

pub struct Gateway {
    pub url: String,
    pub address: std::net::SocketAddr,
    pub bus: Bus,
    pub store: Store,
    pub script: Arc<Mutex<Script>>,
    pub client: reqwest::Client,
    operators: AtomicUsize,
    stop: CancellationToken,
    _nats: NatsServer,
    _database: TestDatabase,
}

impl Gateway {
    /// The test database's URL (for settings of a command run against it).
    pub fn database_url(&self) -> &str {
        self._database.url()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn metrics() -> capstan_telemetry::MetricsHandle {
    static HANDLE: OnceLock<capstan_telemetry::MetricsHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| capstan_telemetry::metrics(None).expect("a metrics recorder"))
        .clone()
}

pub const RPC_TIMEOUT: Duration = Duration::from_secs(5);

impl Gateway {
    /// The gateway with a fake agent channel answering.
    pub async fn start() -> Gateway {
        let gateway = Gateway::start_alone().await;
        gateway.serve_fake().await;
        gateway
    }

    /// The gateway with a fake agent channel answering, believing `client_addresses`.
    pub async fn start_behind(client_addresses: capstan_gateway::ClientAddresses) -> Gateway {
        let gateway = Gateway::start_alone_behind(client_addresses).await;
        gateway.serve_fake().await;
        gateway
    }

    /// The gateway with nobody answering its questions.
    pub async fn start_alone() -> Gateway {
        Gateway::start_alone_behind(Default::default()).await
    }

    async fn start_alone_behind(client_addresses: capstan_gateway::ClientAddresses) -> Gateway {
        let nats = NatsServer::start();
        let database = TestDatabase::create().await;
        let bus = Bus::connect(&nats.url(), "gateway-test").await.unwrap();
        let store = Store::connect(database.url(), "gateway", 4).await.unwrap();
        store.migrate(&capstan_gateway::MIGRATOR).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let state = AppState::from(capstan_gateway::Shared {
            bus: bus.clone(),
            store: store.clone(),
            rpc_timeout: RPC_TIMEOUT,
            metrics: metrics(),
            client_addresses,
        });
        let stop = CancellationToken::new();
        tokio::spawn(capstan_gateway::serve(listener, state, stop.clone()));
        Gateway {
            url: format!("http://{address}"),
            address,
            bus,
            store,
            script: Arc::default(),
            client: reqwest::Client::new(),
            operators: AtomicUsize::new(0),
            stop,
            _nats: nats,
            _database: database,
        }
    }

    async fn serve_fake(&self) {
        let script = self.script.clone();
        let agent_script = self.script.clone();
        let server = RpcServer::new(self.bus.clone(), Domain::AgentChannel).route_with_body(
            move |request: AgentRequest, body: Bytes| {
                let script = agent_script.clone();
                async move {
                    let mut script = script.lock().unwrap();
                    script.agent_requests.push((request, body));
                    Ok::<_, RpcError>(script.agent_answer.clone().unwrap_or_else(|| {
                        let answer = AgentResponse {
                            status: 200,
                            body: json!({"ok": true}),
                            retry_after: None,
                        };
                        (answer, Bytes::new())
                    }))
                }
            },
        );
        // Every agent request's head is let through to be read (a signed agent's, as far as
        // this fake knows).
        let server = server.route(
            |_: capstan_events::agent_channel::rpc::VetAgentRequest| async {
                Ok::<_, RpcError>(capstan_events::agent_channel::rpc::Vetted { refusal: None })
            },
        );
        let server = fake(server, &script, |script, request: ListJoins| {
            let joins = match request.state {
                JoinFilter::Rejected => script.rejected.clone(),
                _ => script.joins.clone().unwrap_or_else(|| vec![join_view()]),
            };
            Joins {
                page: capstan_events::agent_channel::rpc::PageInfo::of(
                    request.page,
                    joins.len() as u64,
                ),
                joins,
            }
        });
        let server = fake(server, &script, |_, request: ApproveJoin| Approved {
            node_id: request.node_id.unwrap_or(NodeId(17)),
        });
        let server = fake(server, &script, |_, _: RejectJoin| Done {});
        let server = fake(server, &script, |_, _: ReopenJoin| Done {});
        let server = fake(server, &script, |script, request: ListNodes| {
            let nodes = script.nodes.clone().unwrap_or_else(|| vec![node_view(17)]);
            Nodes {
                page: capstan_events::agent_channel::rpc::PageInfo::of(
                    request.page,
                    nodes.len() as u64,
                ),
                nodes,
            }
        });
        let server = fake(server, &script, |script, GetNode(request): GetNode| {
            script
                .nodes
                .iter()
                .flatten()
                .find(|node| node.id == request.node_id)
                .cloned()
                .unwrap_or_else(|| node_view(request.node_id))
        });
        let server = fake(
            server,
            &script,
            |_, _: capstan_events::agent_channel::rpc::FleetVersionsRequest| {
                capstan_events::agent_channel::rpc::FleetVersions {
                    versions: vec![capstan_events::agent_channel::rpc::VersionCount {
                        version: Some("1.2.0".into()),
                        nodes: 1,
                        on_trial: vec![],
                        refusals: vec![],
                    }],
                    nodes: vec![],
                }
            },
        );
        let server = fake(server, &script, |_, _: DisconnectNode| Done {});
        let server = fake(server, &script, |_, _: CreateJob| JobCreated {
            id: 42,
            state: JobState::Pending,
        });
        let server = fake(server, &script, |_, _: ListJobs| Jobs {
            jobs: vec![job_view(42)],
        });
        let server = fake(
            server,
            &script,
            |script, GetJob(request): GetJob| match &script.job {
                Some(job) => JobView {
                    id: request.job_id,
                    ..job.clone()
                },
                None => job_view(request.job_id),
            },
        );
        let server = fake(server, &script, |_, request: JobOutputRequest| JobOutput {
            state: JobState::Running,
            new_output: "hello".into(),
            offset: request.offset + 5,
        });
        let server = fake(server, &script, |_, _: CancelJobRequest| Done {});
        let server = fake(server, &script, |_, _: MarkJobFailed| Done {});
        let server = fake(server, &script, |_, request: RefusalCountRequest| {
            RefusalCount {
                node_id: request.node_id,
                refused: 3,
            }
        });
        tokio::spawn(server.serve(self.stop.clone()));
        tokio::spawn(fake_incidents(self.bus.clone(), &self.script).serve(self.stop.clone()));
        tokio::spawn(fake_monitor(self.bus.clone(), &self.script).serve(self.stop.clone()));
        tokio::spawn(fake_rollouts(self.bus.clone(), &self.script).serve(self.stop.clone()));
        tokio::spawn(fake_backups(self.bus.clone(), &self.script).serve(self.stop.clone()));
        tokio::spawn(
            crate::machines::fake_machines(self.bus.clone(), &self.script).serve(self.stop.clone()),
        );
        // Ready once it answers (the subscription is made asynchronously).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let listing: ListNodes =
                serde_json::from_value(json!({"actor": {"name": "t", "level": 7}})).unwrap();
            let answer = self.bus.ask(&listing, Duration::from_millis(500)).await;
            if answer.is_ok() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the fake agent channel never answered"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.script.lock().unwrap().asked.clear();
    }

    /// A fresh operator at `level` and its token.
    pub async fn token(&self, level: Level) -> String {
        let number = self.operators.fetch_add(1, Ordering::SeqCst);
        let name = format!("operator{number}-level{}", u8::from(level));
        capstan_gateway::admin::issue_operator(&self.store, &name, level)
            .await
            .unwrap()
            .expose()
            .to_string()
    }

    pub fn get(&self, path: &str, token: &str) -> reqwest::RequestBuilder {
        self.client
            .get(format!("{}{path}", self.url))
            .bearer_auth(token)
    }

    pub fn post(&self, path: &str, token: &str, body: Value) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.url))
            .bearer_auth(token)
            .json(&body)
    }

    pub fn put(&self, path: &str, token: &str, body: Value) -> reqwest::RequestBuilder {
        self.client
            .put(format!("{}{path}", self.url))
            .bearer_auth(token)
            .json(&body)
    }

    /// The ops the fake was asked, in order.
    pub fn asked_ops(&self) -> Vec<String> {
        self.script
            .lock()
            .unwrap()
            .asked
            .iter()
            .map(|(op, _)| op.clone())
            .collect()
    }
}

/// A fake incidents service: each op answers the least a route needs to succeed.
/// Rollouts as the gateway sees it: a release list, and a publish that records its artifacts'
/// bytes as they arrived beside the question.
fn fake_rollouts(bus: Bus, script: &Arc<Mutex<Script>>) -> RpcServer {
    use capstan_events::rollouts::rpc as rollouts;
    let server = RpcServer::new(bus, Domain::Rollouts);
    let server = fake(server, script, |_, _: rollouts::ListReleases| {
        rollouts::Releases {
            releases: vec![release_view()],
        }
    });
    use capstan_events::rollouts::staged;
    let server = fake(server, script, |_, _: staged::ListRollouts| {
        staged::Rollouts {
            rollouts: vec![rollout_view()],
        }
    });
    let server = fake(server, script, |_, _: staged::StartRollout| rollout_view());
    let server = fake(server, script, |_, _: staged::GetRollout| rollout_view());
    let server = fake(server, script, |_, _: staged::ActOnRollout| rollout_view());
    let server = fake(server, script, |_, _: rollouts::ListSiteReleases| {
        rollouts::SiteReleases {
            releases: vec![site_release_view()],
        }
    });
    let publishing_site = script.clone();
    let server =
        server.route_with_body(move |request: rollouts::PublishSiteRelease, body: Bytes| {
            let script = publishing_site.clone();
            async move {
                let mut script = script.lock().unwrap();
                script.asked.push((
                    <rollouts::PublishSiteRelease as Rpc>::OP.to_string(),
                    json!({"version": request.version, "archive_bytes": body.to_vec()}),
                ));
                Ok((site_release_view(), Bytes::new()))
            }
        });
    let script = script.clone();
    server.route_with_body(move |request: rollouts::PublishRelease, body: Bytes| {
        let script = script.clone();
        async move {
            let mut script = script.lock().unwrap();
            script.asked.push((
                <rollouts::PublishRelease as Rpc>::OP.to_string(),
                json!({"metadata": request.metadata, "artifact_bytes": body.to_vec()}),
            ));
            Ok((release_view(), Bytes::new()))
        }
    })
}

pub fn rollout_view() -> capstan_events::rollouts::staged::RolloutView {
    capstan_events::rollouts::staged::RolloutView {
        id: 1,
        kind: capstan_events::rollouts::staged::RolloutKind::Release,
        version: "2.1.0".into(),
        state: capstan_events::rollouts::staged::RolloutState::Running,
        stage: 0,
        stages: vec![],
        pages: vec![],
        soak_until: None,
        halted_at_node: None,
        halt_reason: None,
        started_by: "chris".into(),
        started_at: chrono::Utc::now(),
        finished_at: None,
        passed: 0,
        failed: 0,
        skipped: 0,
        total: 0,
        steps: vec![],
        left_out: vec![],
    }
}

pub fn site_release_view() -> capstan_events::rollouts::rpc::SiteReleaseView {
    capstan_events::rollouts::rpc::SiteReleaseView {
        version: "2.1.0".into(),
        archive_sha256: "0".repeat(64),
        archive_bytes: 10240,
        files: 3,
        signed_by: vec!["SHA256:abc".into()],
        published_at: chrono::DateTime::UNIX_EPOCH,
        published_by: "ada".into(),
        deploy_all: false,
        deploy_all_outcome: None,
        deploy_all_rollout: None,
        deploy_all_reason: None,
    }
}

pub fn release_view() -> capstan_events::rollouts::rpc::ReleaseView {
    capstan_events::rollouts::rpc::ReleaseView {
        version: "1.3.0".into(),
        sequence: 4,
        expires_at: chrono::DateTime::UNIX_EPOCH,
        arches: vec!["linux-amd64".into()],
        has_support_bundle: false,
        has_statement: false,
        next_key: None,
        signed_by: vec!["SHA256:abc".into()],
        published_at: chrono::DateTime::UNIX_EPOCH,
        published_by: "ada".into(),
        on_offer: true,
    }
}

fn fake_incidents(bus: Bus, script: &Arc<Mutex<Script>>) -> RpcServer {
    use capstan_events::incidents::rpc as incidents;
    let server = RpcServer::new(bus, Domain::Incidents);
    let server = fake(server, script, |_, _: incidents::ListIncidents| {
        incidents::Incidents {
            incidents: vec![],
            counts: Default::default(),
        }
    });
    let server = fake(server, script, |_, _: incidents::GetIncident| {
        incidents::IncidentDetail {
            incident: incident_view(5),
            timeline: vec![],
            signals: vec![],
            grouped: vec![],
        }
    });
    let server = fake(server, script, |_, _: incidents::TriageIncident| {
        incidents::Triaged {
            incident: incident_view(5),
            recorded: true,
        }
    });
    let server = fake(
        server,
        script,
        |_, _: incidents::AddNote| incidents::Done {},
    );
    let server = fake(server, script, |_, _: incidents::HeaderRequest| {
        incidents::Header {
            needs_you: 0,
            happening: 0,
            colour: None,
            words: String::new(),
        }
    });
    let server = fake(server, script, |_, _: incidents::ListSilences| {
        incidents::Silences { silences: vec![] }
    });
    let server = fake(server, script, |_, _: incidents::CreateSilence| {
        incidents::SilenceView {
            id: 1,
            node_id: NodeId(5),
            node_name: None,
            by: "ada".into(),
            reason: "maintenance".into(),
            created_at: chrono::Utc::now(),
            ends_at: chrono::Utc::now(),
            active: true,
        }
    });
    let server = fake(server, script, |_, _: incidents::DeleteSilence| {
        incidents::Done {}
    });
    let server = fake(server, script, |_, _: incidents::ListWebhooks| {
        incidents::Webhooks { webhooks: vec![] }
    });
    let server = fake(server, script, |_, _: incidents::CreateWebhook| {
        incidents::WebhookCreated {
            webhook: incidents::WebhookView {
                id: 1,
                url: "https://hooks.example/x".into(),
                kind: incidents::WebhookKind::Standard,
                min_severity: capstan_events::incidents::Severity::Warning,
                created_by: "ada".into(),
                created_at: chrono::Utc::now(),
            },
            secret: "whsec_x".into(),
        }
    });
    let server = fake(server, script, |_, _: incidents::DeleteWebhook| {
        incidents::Done {}
    });
    fn preferences() -> incidents::MailPreferences {
        incidents::MailPreferences {
            email_warning: false,
            email_critical: true,
        }
    }
    let server = fake(server, script, |_, _: incidents::GetNotifications| {
        preferences()
    });
    let server = fake(server, script, |_, _: incidents::SetNotifications| {
        preferences()
    });
    let server = fake(server, script, |_, _: incidents::BellRequest| {
        incidents::Bell { items: vec![] }
    });
    let server = fake(
        server,
        script,
        |_, _: incidents::WebhookDeliveriesRequest| incidents::WebhookDeliveries {
            deliveries: vec![],
        },
    );
    fake(server, script, |_, _: incidents::SetAlerts| {
        incidents::Done {}
    })
}

fn uptime_check(node_id: NodeId) -> capstan_events::monitor::rpc::UptimeCheck {
    capstan_events::monitor::rpc::UptimeCheck {
        node_id,
        enabled: true,
        kind: capstan_events::monitor::CheckKind::HttpStatus,
        url: Some("https://shop.example/".into()),
        keyword: None,
        interval_secs: 60,
        status: capstan_events::monitor::UptimeStatus::Up,
        consecutive_failures: 0,
        down_since: None,
        reason: None,
        checked_at: None,
        response_ms: None,
    }
}

/// A fake monitor service: each op answers the least a route needs to succeed.
fn target_view(id: i64) -> capstan_events::backups::rpc::TargetView {
    capstan_events::backups::rpc::TargetView {
        id,
        name: "offsite".into(),
        provider: capstan_events::backups::Provider::GenericS3,
        endpoint: "https://s3.example.net".into(),
        region: "eu-central-1".into(),
        bucket: "capstan-backups".into(),
        folder: "fleet".into(),
        is_default: false,
        created_at: chrono::Utc::now(),
    }
}

fn fleet_policy() -> capstan_events::backups::rpc::FleetPolicy {
    use capstan_events::backups::rpc as backups;
    backups::FleetPolicy {
        enabled: true,
        fields: backups::PolicyFields {
            every_minutes: 1440,
            window_start_hour: 0,
            window_hours: 24,
            mode: backups::BackupMode::Chain,
            keep_days: 7,
            full_every_days: 7,
            verify_every_days: 7,
            keep_daily: 0,
            keep_weekly: 0,
            keep_monthly: 0,
        },
    }
}

fn node_policy(node_id: NodeId) -> capstan_events::backups::rpc::NodePolicyView {
    capstan_events::backups::rpc::NodePolicyView {
        node_id,
        position: capstan_events::backups::rpc::Position::Fleet,
        scheduled: true,
        fields: fleet_policy().fields,
        decided_by: None,
        decided_at: None,
    }
}

fn fake_backups(bus: Bus, script: &Arc<Mutex<Script>>) -> RpcServer {
    use capstan_events::backups::rpc as backups;
    let server = RpcServer::new(bus, Domain::Backups);
    let server = fake(server, script, |script, _: backups::ListTargets| {
        backups::Targets {
            targets: vec![target_view(1)],
            seal_key: script
                .seal_key
                .clone()
                .unwrap_or_else(|| backups::SealKeyView {
                    set: true,
                    file: Some("/var/lib/capstan/backups-seal.key".into()),
                }),
        }
    });
    let server = fake(server, script, |_, _: backups::CreateTarget| target_view(2));
    let server = fake(server, script, |_, request: backups::SetDefaultTarget| {
        backups::TargetView {
            is_default: true,
            ..target_view(request.target_id)
        }
    });
    let server = fake(server, script, |_, _: backups::GetPolicy| {
        backups::FleetPolicyView {
            policy: fleet_policy(),
            changed_by: None,
            changed_at: None,
        }
    });
    let server = fake(server, script, |_, request: backups::SetPolicy| {
        backups::FleetPolicyView {
            policy: request.policy,
            changed_by: Some("ada".into()),
            changed_at: Some(chrono::Utc::now()),
        }
    });
    let server = fake(server, script, |_, request: backups::GetNodePolicy| {
        node_policy(request.node_id)
    });
    let server = fake(server, script, |_, request: backups::SetNodePolicy| {
        node_policy(request.node_id)
    });
    let server = fake(
        server,
        script,
        |script, request: backups::NodeBackupsRequest| match &script.node_backups {
            Some(answer) => backups::NodeBackups {
                node_id: request.node_id,
                ..answer.clone()
            },
            None => no_backups(request.node_id),
        },
    );
    let server = fake(
        server,
        script,
        |script, _: backups::FleetCoverageRequest| {
            script
                .coverage
                .clone()
                .unwrap_or_else(|| backups::FleetCoverage {
                    targets: vec![backups::TargetCoverage {
                        target_id: 1,
                        name: "offsite".into(),
                        is_default: false,
                        nodes: 0,
                        waiting: 0,
                        draining: 0,
                    }],
                    nodes: 0,
                    covered: 0,
                    uncovered_count: 0,
                    uncovered: vec![],
                })
        },
    );
    fn dispatched() -> backups::Dispatched {
        backups::Dispatched { job_id: 77 }
    }
    let server = fake(server, script, |_, _: backups::RunNow| dispatched());
    let server = fake(server, script, |_, _: backups::VerifyRequest| dispatched());
    let server = fake(server, script, |_, _: backups::RestoreRequest| dispatched());
    fake(server, script, |_, _: backups::MoveRequest| dispatched())
}

/// A node with no backup yet, as the backups service states it.
pub fn no_backups(node_id: NodeId) -> capstan_events::backups::rpc::NodeBackups {
    use capstan_events::backups::rpc as backups;
    backups::NodeBackups {
        node_id,
        chains: vec![],
        last_backup: None,
        last_full: None,
        oldest: None,
        shelf_problem: None,
        verify_state: backups::VerifyState {
            state: backups::VerifyStateKind::NoBackups,
            problem: false,
            words: "No backup yet".into(),
            last: None,
        },
        recovery_key: None,
        last_failure: None,
        busy: None,
        orphans: Default::default(),
    }
}

fn fake_monitor(bus: Bus, script: &Arc<Mutex<Script>>) -> RpcServer {
    use capstan_events::monitor::rpc as monitor;
    let server = RpcServer::new(bus, Domain::Monitor);
    let server = fake(server, script, |_, _: monitor::ListUptime| {
        monitor::UptimeChecks {
            checks: vec![uptime_check(NodeId(5))],
        }
    });
    let server = fake(server, script, |_, _: monitor::GetUptime| {
        monitor::UptimeDetail {
            check: uptime_check(NodeId(5)),
            history: vec![],
        }
    });
    let server = fake(server, script, |_, _: monitor::SetUptime| {
        uptime_check(NodeId(5))
    });
    let server = fake(server, script, |_, _: monitor::GetCertificate| {
        monitor::CertificateView {
            problem: None,
            expires_at: None,
            names: vec![],
            checked_at: None,
        }
    });
    let server = fake(server, script, |_, _: monitor::GetFleetSecurity| {
        monitor::FleetSecurity { machines: vec![] }
    });
    let server = fake(server, script, |_, _: monitor::StartEdgeProbe| {
        monitor::EdgeProbeStarted { id: 3 }
    });
    let server = fake(server, script, |_, _: monitor::GetEdgeProbe| edge_probe(3));
    let server = fake(server, script, |_, _: monitor::ListEdgeProbes| {
        monitor::EdgeProbes {
            probes: vec![edge_probe(3)],
        }
    });
    fake(server, script, |_, _: monitor::GetUptimeSummary| {
        monitor::UptimeSummary {
            up: 1,
            down: 0,
            unknown: 0,
            off: 0,
            down_checks: vec![],
        }
    })
}

fn edge_probe(id: i64) -> capstan_events::monitor::rpc::EdgeProbeView {
    capstan_events::monitor::rpc::EdgeProbeView {
        id,
        node_id: NodeId(5),
        status: capstan_events::monitor::rpc::EdgeProbeStatus::Queued,
        url: "https://shop.example/".into(),
        requested_by: "ada".into(),
        requested_at: chrono::Utc::now(),
        started_at: None,
        finished_at: None,
        rounds: 0,
        paths: vec![],
        verdict: None,
        notes: vec![],
        error: None,
    }
}

/// Registers a fake of the question `R` that records its request and answers
/// `answer(request)`, or the scripted failure.
pub fn fake<R: JsonRpc>(
    server: RpcServer,
    script: &Arc<Mutex<Script>>,
    answer: fn(&Script, R) -> R::Reply,
) -> RpcServer {
    let (script, op) = (script.clone(), R::OP);
    server.route(move |request: R| {
        let script = script.clone();
        async move {
            let mut script = script.lock().unwrap();
            script
                .asked
                .push((op.to_string(), serde_json::to_value(&request).unwrap()));
            match &script.failure {
                Some(failure) => Err(failure.clone()),
                None => Ok(answer(&script, request)),
            }
        }
    })
}

pub fn join_view() -> JoinView {
    JoinView {
        id: uuid::Uuid::nil(),
        name: "web-1".into(),
        fingerprint: "SHA256:abc".into(),
        source_address: "203.0.113.7".into(),
        addresses: vec!["203.0.113.7".into()],
        agent_version: "1.2.3".into(),
        site_root: None,
        container: None,
        state: JoinState::Pending,
        requested_at: chrono::Utc::now(),
        expires_at: chrono::Utc::now(),
        name_taken_by: None,
    }
}

pub fn node_view(id: impl Into<NodeId>) -> NodeView {
    NodeView {
        id: id.into(),
        name: "web-1".into(),
        fingerprint: Some("SHA256:abc".into()),
        agent_version: Some("1.2.3".into()),
        vocabulary: vec!["check_status".into()],
        addresses: vec![],
        site_root: None,
        container: None,
        connected_at: None,
        last_seen_at: None,
        left_at: None,
        online: true,
        below_floor: false,
        facts: json!({}),
        health: Default::default(),
        last_check: None,
        last_report: None,
        placement: Default::default(),
    }
}

pub fn incident_view(id: i64) -> capstan_events::incidents::rpc::IncidentView {
    use capstan_events::incidents::{Severity, Status, Triage};
    capstan_events::incidents::rpc::IncidentView {
        id,
        node_id: NodeId(17),
        node_name: Some("web-1".into()),
        source: "plane:agent_silent".into(),
        title: "The agent has stopped checking in".into(),
        detail: "Last check-in recorded at 2026-12-01T10:00:00Z".into(),
        severity: Severity::Critical,
        status: Status::Open,
        triage: Triage::New,
        view: "new".into(),
        needs_you: true,
        snooze_until: None,
        opened_at: chrono::Utc::now(),
        closed_at: None,
        last_seen_at: chrono::Utc::now(),
        group_id: None,
    }
}

pub fn job_view(id: i64) -> JobView {
    JobView {
        id,
        node_id: NodeId(17),
        primitive: "check_status".into(),
        class: PrimitiveClass::Read,
        params: json!({}),
        state: JobState::Pending,
        outcome: None,
        reason: None,
        result: None,
        requested_by: "ada".into(),
        created_at: chrono::Utc::now(),
        claimed_at: None,
        finished_at: None,
    }
}

/// The path of `route` with its `{id}` filled in.
pub fn concrete_path(path: &str) -> String {
    if path.starts_with("/api/v1/joins/") {
        path.replace("{id}", "0190b5c2-7d1e-7a3c-9f00-000000000001")
    } else {
        path.replace("{id}", "5")
    }
}

/// A body the route takes.
pub fn body_for(path: &str) -> Value {
    if path.ends_with("/jobs") {
        json!({"primitive": "check_status", "params": {}})
    } else if path.ends_with("/triage") {
        json!({"do": "resolved"})
    } else if path.ends_with("/notes") {
        json!({"note": "looked at it"})
    } else if path == "/api/v1/silences" {
        json!({"node_id": 5, "ends_at": "2099-01-01T00:00:00Z", "reason": "maintenance"})
    } else if path == "/api/v1/webhooks" {
        json!({"url": "https://hooks.example/x", "kind": "standard", "min_severity": "warning"})
    } else if path == "/api/v1/me/notifications" {
        json!({"email": null, "email_warning": false, "email_critical": true})
    } else if path.ends_with("/alerts") {
        json!({"alerts": "on"})
    } else if path.ends_with("/uptime") {
        json!({"enabled": true, "kind": "http_status", "url": "https://shop.example/"})
    } else if path == "/api/v1/releases" {
        json!({"metadata": "{}", "binaries": {"linux-amd64": "AAEC"}})
    } else if path == "/api/v1/site-releases" {
        json!({"version": "2.1.0", "manifest": "{}", "signatures": "{}", "archive": "AAEC"})
    } else if path == "/api/v1/backups/policy" {
        json!({"enabled": true, "every_minutes": 1440, "window_start_hour": 0,
               "window_hours": 24, "mode": "chain", "keep_days": 7, "full_every_days": 7,
               "verify_every_days": 7})
    } else if path.ends_with("/backups/policy") {
        json!({"position": "off"})
    } else if path.ends_with("/backups/verify") {
        json!({"level": 2, "seq": 1})
    } else if path.ends_with("/backups/restore") {
        json!({"seq": 1, "what": "database"})
    } else if path.ends_with("/backups/move") {
        json!({"target_id": 1})
    } else if path.ends_with("/adopt") {
        json!({"instance_id": "50"})
    } else if path == "/api/v1/hosts" {
        json!({"address": "203.0.113.40", "max_sites": 4})
    } else if path == "/api/v1/backups/targets" {
        json!({"name": "offsite", "provider": "generic_s3", "endpoint": "https://s3.example.net",
               "region": "eu-central-1", "bucket": "capstan-backups", "folder": "fleet",
               "access_key": "AKIAEXAMPLE", "secret_key": "c2VjcmV0"})
    } else {
        json!({})
    }
}

pub fn endpoint_path(endpoint: AgentEndpoint) -> String {
    format!("/api/v1/agent/{}", endpoint.as_str())
}

/// The error body's `(code, message)`.
pub async fn error_of(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("an error body is JSON");
    (
        status,
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}
