//! The operator's listings of nodes and joins: one page at a time, searched and filtered in
//! SQL, so a fleet of ten thousand nodes and a flood of joins cost the asker one page. Every
//! value is bound; the statement is put together only from the fixed fragments below.
//!
//! The placement filter judges in SQL what `domain/fleet.rs` judges in Rust for the page's
//! views ([`PLACEMENT`]), and a test holds the two to the same answers. The health filter reads
//! the monitor's dots as kept here (`node_health`, MO-07): the rule is the monitor's alone.

use capstan_events::agent_channel::rpc::{JoinFilter, ListJoins, ListNodes, Page};
use capstan_events::NodeId;
use capstan_store::PgConnection;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, QueryBuilder};

use super::{JoinRow, NodeRow, Result, NODE_COLUMNS};
use crate::domain::{joins::JoinRecordState, ONLINE_WINDOW, REJECTED_REOPENABLE_FOR};
use capstan_events::Word as _;

/// The latest finished reading of `word` for node `n` (withdrawn jobs say nothing about it),
/// found through the `jobs_latest_reading` index.
fn latest(word: &str) -> String {
    format!(
        "SELECT j.outcome, j.result FROM jobs j
         WHERE j.node_id = n.id AND j.primitive = '{word}'
           AND j.finished_at IS NOT NULL AND j.outcome IS NOT NULL AND j.outcome <> 'withdrawn'
         ORDER BY j.finished_at DESC, j.id DESC LIMIT 1"
    )
}

/// The kernel boot id a host report `result` carries (a non-empty string), else null: what a
/// contained node and its host share (issue 27, `fleet::placements`).
fn boot_of(result: &str) -> String {
    format!(
        "(CASE WHEN jsonb_typeof({result} -> 'boot_id') = 'string' \
         THEN nullif({result} ->> 'boot_id', '') END)"
    )
}

/// Where node `n` sits (PV-15, as `fleet::placements`), given `placed` (each container name
/// and kernel boot id with the lowest-numbered host listing the name on that kernel) joined as
/// `p` on `n`'s container and its own latest host report's boot id (issue 27: the node's
/// corroboration), and `hosts` joined as `hs`: a container when that host is another node, else
/// a host when it is one, else a machine.
const PLACEMENT: &str = "(CASE
    WHEN p.host_id IS NOT NULL AND p.host_id <> n.id THEN 'container'
    WHEN hs.id IS NOT NULL THEN 'host'
    ELSE 'machine' END)";

/// The text searched for, lower-cased; and as a fingerprint (without spaces and colons).
fn search_terms(search: &Option<String>) -> Option<(String, String, Option<i64>)> {
    let text = search
        .as_deref()
        .map(str::trim)
        .filter(|text| !text.is_empty())?;
    let lower = text.to_lowercase();
    let fingerprint: String = lower
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ':')
        .collect();
    Some((lower, fingerprint, text.parse::<i64>().ok()))
}

/// `FROM` and `WHERE` of a node listing.
fn push_node_filters(
    query: &mut QueryBuilder<'_, Postgres>,
    request: &ListNodes,
    now: DateTime<Utc>,
) {
    query.push(" FROM nodes n");
    if request.health.is_some() {
        query.push(" LEFT JOIN node_health h ON h.node_id = n.id");
    }
    if request.placement.is_some() {
        query.push(" LEFT JOIN LATERAL (SELECT ");
        query.push(boot_of("own.result"));
        query.push(" AS boot FROM (");
        query.push(latest("host_report"));
        query.push(
            ") AS own WHERE own.outcome = 'completed') ob ON true
             LEFT JOIN placed p ON p.name = n.container AND p.boot = ob.boot
             LEFT JOIN hosts hs ON hs.id = n.id",
        );
    }
    query.push(" WHERE true");
    if let Some((lower, fingerprint, id)) = search_terms(&request.search) {
        query.push(" AND (strpos(lower(n.name), ");
        query.push_bind(lower.clone());
        query.push(") > 0 OR (");
        query.push_bind(fingerprint.clone());
        query.push(" <> '' AND strpos(replace(lower(coalesce(n.fingerprint, '')), ':', ''), ");
        query.push_bind(fingerprint);
        query.push(") > 0) OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(n.addresses) AS a (address) WHERE strpos(lower(a.address), ");
        query.push_bind(lower);
        query.push(") > 0) OR n.id = ");
        query.push_bind(id);
        query.push(")");
    }
    if let Some(online) = request.online {
        let since = now - chrono::Duration::from_std(ONLINE_WINDOW).unwrap_or_default();
        query.push(
            " AND (n.fingerprint IS NOT NULL AND n.last_seen_at IS NOT NULL AND n.last_seen_at >= ",
        );
        query.push_bind(since);
        query.push(") = ");
        query.push_bind(online);
    }
    if let Some(paired) = request.paired {
        query.push(" AND (n.fingerprint IS NOT NULL) = ");
        query.push_bind(paired);
    }
    if let Some(ids) = &request.ids {
        query.push(" AND n.id = ANY(");
        query.push_bind(ids.clone());
        query.push(")");
    }
    if let Some(dot) = request.health {
        query.push(" AND coalesce(h.dot, 'gray') = ");
        query.push_bind(dot.as_str());
    }
    if let Some(kind) = request.placement {
        query.push(" AND ");
        query.push(PLACEMENT);
        query.push(" = ");
        query.push_bind(kind.as_str());
    }
}

/// The hosts (`id`, `result` of the latest completed host report saying Docker is installed)
/// and the container names they list, each with the lowest-numbered host listing it, when the
/// placement filter needs them: worked out once for the statement, then joined by name.
fn push_hosts(query: &mut QueryBuilder<'_, Postgres>, request: &ListNodes) {
    if request.placement.is_some() {
        query.push("WITH hosts AS (SELECT n.id, latest.result, ");
        query.push(boot_of("latest.result"));
        query.push(" AS boot FROM nodes n CROSS JOIN LATERAL (");
        query.push(latest("host_report"));
        query.push(
            ") AS latest WHERE latest.outcome = 'completed' AND latest.result ->> 'docker' = 'installed'),
             placed AS (SELECT c.item ->> 'name' AS name, h.boot, min(h.id) AS host_id
                 FROM hosts h
                 CROSS JOIN LATERAL jsonb_array_elements(CASE
                     WHEN jsonb_typeof(h.result -> 'containers') = 'array' THEN h.result -> 'containers'
                     ELSE '[]'::jsonb END) AS c (item)
                 WHERE jsonb_typeof(c.item -> 'name') = 'string' AND h.boot IS NOT NULL
                 GROUP BY 1, 2) ",
        );
    }
}

fn bounds(page: Page) -> (i64, i64) {
    (
        i64::from(page.limit),
        i64::try_from(page.offset).unwrap_or(i64::MAX),
    )
}

/// One page of the nodes the request asks for (by name, then id), and how many match in all.
/// `now` is the clock the online window is judged by.
pub async fn list_nodes_page(
    connection: &mut PgConnection,
    request: &ListNodes,
    now: DateTime<Utc>,
) -> Result<(Vec<NodeRow>, u64)> {
    let columns: Vec<String> = NODE_COLUMNS
        .split(',')
        .map(|column| format!("n.{}", column.trim()))
        .collect();
    let (limit, offset) = bounds(request.page);
    // The placement filter works out every host and container first, so its page and its
    // count share that work in one statement; otherwise the count goes apart, since a window
    // count would make the page read every matching row whole where alone it stops at the
    // page's end of the name index.
    let together = request.placement.is_some();
    let mut query = QueryBuilder::new("");
    push_hosts(&mut query, request);
    query.push("SELECT ");
    query.push(columns.join(", "));
    query.push(if together {
        ", count(*) OVER () AS total"
    } else {
        ", 0::bigint AS total"
    });
    push_node_filters(&mut query, request, now);
    query.push(" ORDER BY n.name, n.id LIMIT ");
    query.push_bind(limit);
    query.push(" OFFSET ");
    query.push_bind(offset);
    let rows: Vec<Counted<NodeRow>> = query.build_query_as().fetch_all(&mut *connection).await?;
    let total = match rows.first() {
        Some(first) if together => first.total,
        _ => {
            let mut count = QueryBuilder::new("");
            push_hosts(&mut count, request);
            count.push("SELECT count(*)");
            push_node_filters(&mut count, request, now);
            count
                .build_query_scalar()
                .fetch_one(&mut *connection)
                .await?
        }
    };
    Ok((
        rows.into_iter().map(|counted| counted.row).collect(),
        u64::try_from(total).unwrap_or_default(),
    ))
}

#[derive(sqlx::FromRow)]
struct Counted<T> {
    #[sqlx(flatten)]
    row: T,
    total: i64,
}

/// A join as listed: with the paired node already called by its name, if any (shown, never
/// bound).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ListedJoin {
    #[sqlx(flatten)]
    pub join: JoinRow,
    pub name_taken_by: Option<NodeId>,
}

fn push_join_filters(query: &mut QueryBuilder<'_, Postgres>, request: &ListJoins) {
    let pending = JoinRecordState::Pending.as_str();
    let rejected = JoinRecordState::Rejected.as_str();
    let window = REJECTED_REOPENABLE_FOR.as_secs_f64();
    query.push(" FROM joins j WHERE ");
    match request.state {
        JoinFilter::Pending => {
            query.push("j.state = ");
            query.push_bind(pending);
            query.push(" AND j.expires_at > now()");
        }
        JoinFilter::Rejected => {
            query.push("j.state = ");
            query.push_bind(rejected);
            query.push(" AND j.decided_at > now() - make_interval(secs => ");
            query.push_bind(window);
            query.push(")");
        }
        JoinFilter::All => {
            query.push("(j.requested_at > now() - make_interval(secs => ");
            query.push_bind(window);
            query.push(") OR j.state IN (");
            query.push_bind(pending);
            query.push(", ");
            query.push_bind(rejected);
            query.push("))");
        }
    }
    if let Some((lower, fingerprint, _)) = search_terms(&request.search) {
        query.push(" AND (strpos(lower(j.name), ");
        query.push_bind(lower.clone());
        query.push(") > 0 OR strpos(lower(j.source_address), ");
        query.push_bind(lower.clone());
        query.push(") > 0 OR (");
        query.push_bind(fingerprint.clone());
        query.push(" <> '' AND strpos(replace(lower(j.fingerprint), ':', ''), ");
        query.push_bind(fingerprint);
        query.push(") > 0) OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(j.addresses) AS a (address) WHERE strpos(lower(a.address), ");
        query.push_bind(lower);
        query.push(") > 0))");
    }
    if let Some(id) = request.join_id {
        query.push(" AND j.id = ");
        query.push_bind(id);
    }
}

/// One page of the joins the request asks for (newest first), and how many match in all.
pub async fn list_joins_page(
    connection: &mut PgConnection,
    request: &ListJoins,
) -> Result<(Vec<ListedJoin>, u64)> {
    let columns: Vec<String> = super::JOIN_COLUMNS
        .split(',')
        .map(|column| format!("j.{}", column.trim()))
        .collect();
    let (limit, offset) = bounds(request.page);
    let mut query = QueryBuilder::new("SELECT ");
    query.push(columns.join(", "));
    query.push(
        ", (SELECT n.id FROM nodes n WHERE n.name = j.name AND n.fingerprint IS NOT NULL \
         ORDER BY n.id LIMIT 1) AS name_taken_by",
    );
    push_join_filters(&mut query, request);
    query.push(" ORDER BY j.requested_at DESC, j.id LIMIT ");
    query.push_bind(limit);
    query.push(" OFFSET ");
    query.push_bind(offset);
    let rows: Vec<ListedJoin> = query.build_query_as().fetch_all(&mut *connection).await?;
    let mut count = QueryBuilder::new("SELECT count(*)");
    push_join_filters(&mut count, request);
    let total: i64 = count
        .build_query_scalar()
        .fetch_one(&mut *connection)
        .await?;
    Ok((rows, u64::try_from(total).unwrap_or_default()))
}

/// The nodes whose latest completed host report says Docker is installed and lists a container
/// named one of `names`: the hosts a page's containers may sit on, in one statement.
pub async fn hosts_listing_any_container(
    connection: &mut PgConnection,
    names: &[String],
) -> Result<Vec<NodeId>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_scalar(&format!(
        "SELECT n.id FROM nodes n CROSS JOIN LATERAL ({}) AS latest
         WHERE latest.outcome = 'completed' AND latest.result ->> 'docker' = 'installed'
           AND jsonb_typeof(latest.result -> 'containers') = 'array'
           AND EXISTS (SELECT 1 FROM jsonb_array_elements(latest.result -> 'containers') AS c (item)
                       WHERE c.item ->> 'name' = ANY($1))
         ORDER BY n.id",
        latest("host_report")
    ))
    .bind(names)
    .fetch_all(connection)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::{
        agent_channel::{
            rpc::{HealthDot, PlacementKind},
            JobOutcome,
        },
        rpc::{Actor, Level},
    };
    use serde_json::{json, Value};

    async fn store() -> (capstan_store::testsuite::TestDatabase, capstan_store::Store) {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let store = capstan_store::Store::connect(database.url(), "agent_channel", 2)
            .await
            .unwrap();
        store.migrate(&crate::MIGRATOR).await.unwrap();
        (database, store)
    }

    async fn node(connection: &mut PgConnection, name: &str, container: Option<&str>) -> NodeId {
        sqlx::query_scalar("INSERT INTO nodes (name, container) VALUES ($1, $2) RETURNING id")
            .bind(name)
            .bind(container)
            .fetch_one(connection)
            .await
            .unwrap()
    }

    async fn reading(
        connection: &mut PgConnection,
        node: NodeId,
        primitive: &str,
        outcome: JobOutcome,
        result: Option<Value>,
    ) {
        sqlx::query(
            "INSERT INTO jobs (node_id, primitive, class, state, outcome, result, requested_by,
                               budget_s, finished_at)
             VALUES ($1, $2, 'read', $3, $3, $4, 'test', 60, now())",
        )
        .bind(node)
        .bind(primitive)
        .bind(outcome.as_str())
        .bind(result)
        .execute(connection)
        .await
        .unwrap();
    }

    fn listing(page: Page) -> ListNodes {
        ListNodes {
            actor: Actor {
                name: "test".into(),
                level: Level::Read,
                address: None,
            },
            search: None,
            health: None,
            online: None,
            placement: None,
            paired: None,
            ids: None,
            page,
        }
    }

    fn page(offset: u64, limit: u32) -> Page {
        Page { offset, limit }
    }

    // MO-07: the listing's health filter reads the monitor's dots as kept here: a node never
    // judged is gray, and the latest judgement of each node counts (a late one changes nothing).
    #[tokio::test]
    async fn mo_07_the_health_filter_lists_the_dots_the_monitor_told() {
        use capstan_events::monitor::Health;
        let (_database, store) = store().await;
        let mut connection = store.pool().acquire().await.unwrap();
        let at = |secs: i64| Utc::now() - chrono::Duration::seconds(secs);
        let judged = |dot: HealthDot| Health {
            dot,
            reasons: vec![format!("{} for the test", dot.as_str())],
        };
        let never = node(&mut connection, "never-checked", None).await;
        let mut expected = vec![(never, HealthDot::Gray)];
        for (index, dot) in HealthDot::ALL.into_iter().enumerate() {
            let id = node(&mut connection, &format!("case-{index:02}"), None).await;
            crate::store::health::apply(&mut connection, id, &judged(dot), at(60))
                .await
                .unwrap();
            expected.push((id, dot));
        }
        // A judgement of an older check arriving late changes nothing.
        let late = node(&mut connection, "late", None).await;
        crate::store::health::apply(&mut connection, late, &judged(HealthDot::Red), at(10))
            .await
            .unwrap();
        crate::store::health::apply(&mut connection, late, &judged(HealthDot::Green), at(20))
            .await
            .unwrap();
        expected.push((late, HealthDot::Red));
        for dot in HealthDot::ALL {
            let request = ListNodes {
                health: Some(dot),
                ..listing(page(0, 500))
            };
            let (rows, total) = list_nodes_page(&mut connection, &request, Utc::now())
                .await
                .unwrap();
            let mut listed: Vec<NodeId> = rows.iter().map(|row| row.id).collect();
            listed.sort_unstable();
            let wanted: Vec<NodeId> = expected
                .iter()
                .filter(|(_, expected)| *expected == dot)
                .map(|(id, _)| *id)
                .collect();
            assert_eq!(listed, wanted, "{dot:?}");
            assert_eq!(total, wanted.len() as u64, "{dot:?}");
        }
        let kept = crate::store::health::of(&mut connection, &[never, late])
            .await
            .unwrap();
        assert_eq!(kept.get(&never), None);
        assert_eq!(kept[&late], judged(HealthDot::Red));
    }

    // PV-15: the placement filter places nodes as `fleet::placements` does: a Docker host, the
    // container its report lists (the lowest host wins), a container whose host is unknown as
    // a machine, and a host's own container name never placing it under itself. Issue 27: a
    // listing the contained node does not corroborate (its own report names another kernel, or
    // it has none) places it nowhere.
    #[tokio::test]
    async fn pv_15_the_placement_filter_in_sql_places_nodes_as_the_domain_does() {
        let (_database, store) = store().await;
        let mut connection = store.pool().acquire().await.unwrap();
        let report = |names: &[&str]| {
            json!({"docker": "installed", "boot_id": "boot-a",
                   "containers": names.iter().map(|name| json!({"name": name})).collect::<Vec<_>>()})
        };
        let own = |boot: &str| json!({"docker": "absent", "boot_id": boot});
        let host = node(&mut connection, "host-a", None).await;
        reading(
            &mut connection,
            host,
            "host_report",
            JobOutcome::Completed,
            Some(report(&["shop", "blog"])),
        )
        .await;
        let second = node(&mut connection, "host-b", Some("blog")).await;
        reading(
            &mut connection,
            second,
            "host_report",
            JobOutcome::Completed,
            Some(report(&["blog"])),
        )
        .await;
        let shop = node(&mut connection, "shop", Some("shop")).await;
        reading(
            &mut connection,
            shop,
            "host_report",
            JobOutcome::Completed,
            Some(own("boot-a")),
        )
        .await;
        let stranger = node(&mut connection, "stranger", Some("shop")).await;
        reading(
            &mut connection,
            stranger,
            "host_report",
            JobOutcome::Completed,
            Some(own("boot-z")),
        )
        .await;
        let quiet = node(&mut connection, "quiet", Some("shop")).await;
        let orphan = node(&mut connection, "orphan", Some("nowhere")).await;
        let failed = node(&mut connection, "failed-host", None).await;
        reading(
            &mut connection,
            failed,
            "host_report",
            JobOutcome::Failed,
            Some(report(&["x"])),
        )
        .await;
        let bare = node(&mut connection, "bare", None).await;
        reading(
            &mut connection,
            bare,
            "host_report",
            JobOutcome::Completed,
            Some(json!({"docker": "absent"})),
        )
        .await;

        let rows = crate::store::latest_readings(
            &mut connection,
            &[host, second, shop, stranger, quiet, orphan, failed, bare],
        )
        .await
        .unwrap();
        let nodes: Vec<NodeRow> = {
            let mut nodes = Vec::new();
            for id in [host, second, shop, stranger, quiet, orphan, failed, bare] {
                nodes.push(
                    crate::store::node_by_id(&mut connection, id)
                        .await
                        .unwrap()
                        .unwrap(),
                );
            }
            nodes
        };
        let views = crate::actions::node_views(&nodes, &rows, &Default::default(), Utc::now());
        for kind in [
            PlacementKind::Machine,
            PlacementKind::Host,
            PlacementKind::Container,
        ] {
            let request = ListNodes {
                placement: Some(kind),
                ..listing(page(0, 500))
            };
            let (rows, _) = list_nodes_page(&mut connection, &request, Utc::now())
                .await
                .unwrap();
            let mut listed: Vec<NodeId> = rows.iter().map(|row| row.id).collect();
            listed.sort_unstable();
            let wanted: Vec<NodeId> = views
                .iter()
                .filter(|view| view.placement.kind() == kind)
                .map(|view| view.id)
                .collect();
            assert_eq!(listed, wanted, "{kind:?}");
        }
        // host-b lists "blog" but host-a, lower, does too: host-b is a container on host-a.
        assert_eq!(
            views
                .iter()
                .find(|view| view.id == second)
                .unwrap()
                .placement
                .kind(),
            PlacementKind::Container
        );
        let kind_of = |id: NodeId| {
            views
                .iter()
                .find(|view| view.id == id)
                .unwrap()
                .placement
                .kind()
        };
        assert_eq!(kind_of(shop), PlacementKind::Container);
        assert_eq!(kind_of(stranger), PlacementKind::Machine);
        assert_eq!(kind_of(quiet), PlacementKind::Machine);
        // The page's containers find their hosts in one statement.
        let hosts = hosts_listing_any_container(&mut connection, &["shop".to_string()])
            .await
            .unwrap();
        assert_eq!(hosts, [host]);
    }

    // Search by name, address, fingerprint (as shown, with its grouping) or number; paging
    // by name in bounded pages; the other filters.
    #[tokio::test]
    async fn nodes_are_searched_filtered_and_paged_by_name() {
        let (_database, store) = store().await;
        let mut connection = store.pool().acquire().await.unwrap();
        for index in 1..=25 {
            let id = node(&mut connection, &format!("web-{index:02}"), None).await;
            sqlx::query("UPDATE nodes SET addresses = $2 WHERE id = $1")
                .bind(id)
                .bind(json!([format!("10.0.0.{index}")]))
                .execute(&mut *connection)
                .await
                .unwrap();
        }
        let paired = node(&mut connection, "Db-Main", None).await;
        sqlx::query(
            "UPDATE nodes SET public_key = 'k', fingerprint = 'SHA256:AbCdEfGh', last_seen_at = now()
             WHERE id = $1",
        )
        .bind(paired)
        .execute(&mut *connection)
        .await
        .unwrap();
        let now = Utc::now();
        let names = |rows: &[NodeRow]| rows.iter().map(|row| row.name.clone()).collect::<Vec<_>>();

        let (first, total) = list_nodes_page(&mut connection, &listing(page(0, 10)), now)
            .await
            .unwrap();
        assert_eq!(total, 26);
        assert_eq!(names(&first)[0], "Db-Main");
        assert_eq!(names(&first)[9], "web-09");
        let (third, total) = list_nodes_page(&mut connection, &listing(page(20, 10)), now)
            .await
            .unwrap();
        assert_eq!((third.len(), total), (6, 26));
        assert_eq!(names(&third).last().unwrap(), "web-25");
        let (beyond, total) = list_nodes_page(&mut connection, &listing(page(100, 10)), now)
            .await
            .unwrap();
        assert!(beyond.is_empty());
        assert_eq!(total, 26, "the total is counted past the last page too");

        let search = |text: &str| ListNodes {
            search: Some(text.to_string()),
            ..listing(page(0, 100))
        };
        for (text, wanted) in [
            ("DB-main", vec!["Db-Main"]),
            (
                "web-2",
                vec!["web-20", "web-21", "web-22", "web-23", "web-24", "web-25"],
            ),
            ("10.0.0.7", vec!["web-07"]),
            ("SHA256: abcd efgh", vec!["Db-Main"]),
            ("cdef", vec!["Db-Main"]),
            ("%", vec![]),
            ("_", vec![]),
        ] {
            let (rows, total) = list_nodes_page(&mut connection, &search(text), now)
                .await
                .unwrap();
            assert_eq!(names(&rows), wanted, "{text:?}");
            assert_eq!(total, wanted.len() as u64, "{text:?}");
        }
        let (_, everything) = list_nodes_page(&mut connection, &search("   "), now)
            .await
            .unwrap();
        assert_eq!(everything, 26, "blank text searches nothing");
        let (by_number, _) = list_nodes_page(&mut connection, &search(&paired.to_string()), now)
            .await
            .unwrap();
        assert!(by_number.iter().any(|row| row.id == paired));

        let online = ListNodes {
            online: Some(true),
            ..listing(page(0, 100))
        };
        let (rows, _) = list_nodes_page(&mut connection, &online, now)
            .await
            .unwrap();
        assert_eq!(names(&rows), ["Db-Main"]);
        let offline = ListNodes {
            online: Some(false),
            ..listing(page(0, 100))
        };
        assert_eq!(
            list_nodes_page(&mut connection, &offline, now)
                .await
                .unwrap()
                .1,
            25
        );
        let unpaired = ListNodes {
            paired: Some(false),
            search: Some("web-0".into()),
            ..listing(page(0, 100))
        };
        assert_eq!(
            list_nodes_page(&mut connection, &unpaired, now)
                .await
                .unwrap()
                .1,
            9
        );
        let some = ListNodes {
            ids: Some(vec![paired, NodeId(1)]),
            ..listing(page(0, 100))
        };
        assert_eq!(
            list_nodes_page(&mut connection, &some, now)
                .await
                .unwrap()
                .1,
            2
        );
    }

    // Joins: pending newest first, searched by name, address or fingerprint, paged, with the
    // connected node already holding the name (one statement, not one per join).
    #[tokio::test]
    async fn joins_are_searched_and_paged_newest_first() {
        let (_database, store) = store().await;
        let mut connection = store.pool().acquire().await.unwrap();
        for index in 1..=30 {
            sqlx::query(
                "INSERT INTO joins (id, public_key, fingerprint, name, source_address, addresses,
                                    agent_version, state, requested_at, expires_at, source_network)
                 VALUES (gen_random_uuid(), 'k', $1, $2, $3, '[]', '1.0.0', 'pending',
                         now() - make_interval(secs => $4), now() + interval '1 hour', $3)",
            )
            .bind(format!("SHA256:Key{index:02}"))
            .bind(format!("asker-{index:02}"))
            .bind(format!("192.0.2.{index}"))
            .bind(f64::from(index))
            .execute(&mut *connection)
            .await
            .unwrap();
        }
        let taken = node(&mut connection, "asker-03", None).await;
        sqlx::query(
            "UPDATE nodes SET public_key = 'k', fingerprint = 'SHA256:other' WHERE id = $1",
        )
        .bind(taken)
        .execute(&mut *connection)
        .await
        .unwrap();
        let ask = |search: Option<&str>, page: Page| ListJoins {
            actor: Actor {
                name: "test".into(),
                level: Level::Read,
                address: None,
            },
            state: JoinFilter::Pending,
            search: search.map(str::to_string),
            join_id: None,
            page,
        };
        let (rows, total) = list_joins_page(&mut connection, &ask(None, page(0, 10)))
            .await
            .unwrap();
        assert_eq!(total, 30);
        assert_eq!(rows[0].join.name, "asker-01", "newest first");
        assert_eq!(rows[2].name_taken_by, Some(taken));
        assert_eq!(rows[0].name_taken_by, None);
        let (rows, _) = list_joins_page(&mut connection, &ask(None, page(25, 10)))
            .await
            .unwrap();
        assert_eq!(rows.len(), 5);
        for (text, count) in [
            ("ASKER-1", 10),
            ("192.0.2.30", 1),
            ("sha256: key 07", 1),
            ("none", 0),
        ] {
            let (rows, total) = list_joins_page(&mut connection, &ask(Some(text), page(0, 100)))
                .await
                .unwrap();
            assert_eq!((rows.len() as u64, total), (count, count), "{text:?}");
        }
        let one = rows_of(&mut connection, &ask(None, page(0, 1))).await;
        let only = ListJoins {
            join_id: Some(one),
            ..ask(None, page(0, 1))
        };
        let (rows, total) = list_joins_page(&mut connection, &only).await.unwrap();
        assert_eq!((rows[0].join.id, total), (one, 1));
    }

    async fn rows_of(connection: &mut PgConnection, request: &ListJoins) -> uuid::Uuid {
        list_joins_page(connection, request).await.unwrap().0[0]
            .join
            .id
    }
}
