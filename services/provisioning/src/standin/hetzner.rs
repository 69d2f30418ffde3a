//! The Hetzner Cloud stand-in: `/v1/...` in the published shapes (a server's `id`, `name`,
//! `status`, `public_net`, `server_type`, `datacenter.location`, `image`, `labels`, `created`;
//! pages told by `meta.pagination`; errors as `{"error": {"code", "message"}}`). Hetzner makes
//! the root password and answers it once, in the create (or a `reset_password`).

use serde_json::{json, Map, Value};

use super::{ip, page_of, random_password, Answer, Asked, Server, World};

pub fn error(status: u16, message: &str) -> Value {
    let code = match status {
        401 => "unauthorized",
        404 => "not_found",
        422 | 400 => "invalid_input",
        429 => "rate_limit_exceeded",
        _ => "server_error",
    };
    json!({ "error": { "code": code, "message": message, "details": {} } })
}

fn not_found() -> Answer {
    (404, error(404, "server not found"))
}

fn labels(tags: &[String]) -> Value {
    Value::Object(
        tags.iter()
            .map(|tag| (tag.clone(), json!("")))
            .collect::<Map<_, _>>(),
    )
}

fn server_json(server: &Server, running: bool) -> Value {
    let status = match (server.powered, running) {
        (false, _) => "off",
        (true, true) => "running",
        (true, false) if server.polls <= 1 => "initializing",
        (true, false) => "starting",
    };
    let network = server.ipv6.segments();
    json!({
        "id": server.id,
        "name": server.name(),
        "status": status,
        "created": server.created.to_rfc3339(),
        "public_net": {
            "ipv4": {"id": server.id + 500_000, "ip": ip(server.ipv4), "blocked": false, "dns_ptr": server.rdns},
            "ipv6": {"id": server.id + 600_000, "ip": format!("{:x}:{:x}:{:x}:{:x}::/64", network[0], network[1], network[2], network[3]), "blocked": false},
        },
        "server_type": {"name": server.size, "cores": 2, "memory": 4.0, "disk": 40},
        "datacenter": {"name": format!("{}-dc14", server.region), "location": {"name": server.region}},
        "image": {"name": server.image},
        "labels": labels(&server.tags),
    })
}

impl Server {
    fn name(&self) -> &str {
        &self.label
    }
}

fn paged(asked: &Asked, world: &World, key: &str, rows: Vec<Value>) -> Answer {
    let page: usize = asked
        .query("page")
        .and_then(|page| page.parse().ok())
        .unwrap_or(1);
    let per_page: usize = asked
        .query("per_page")
        .and_then(|size| size.parse().ok())
        .unwrap_or(25)
        .min(world.page_cap);
    let total = rows.len();
    let (data, pages) = page_of(rows, page, per_page);
    let next = (page < pages).then_some(page + 1);
    let previous = (page > 1).then(|| page - 1);
    (
        200,
        json!({
            key: data,
            "meta": {"pagination": {
                "page": page, "per_page": per_page, "previous_page": previous,
                "next_page": next, "last_page": pages, "total_entries": total,
            }},
        }),
    )
}

fn action(command: &str) -> Value {
    json!({"action": {"id": 1, "command": command, "status": "running", "progress": 0}})
}

fn create(asked: &Asked, world: &mut World) -> Answer {
    let body = &asked.body;
    let field = |name: &str| body[name].as_str().unwrap_or_default().to_string();
    let (name, region, size, image) = (
        field("name"),
        field("location"),
        field("server_type"),
        field("image"),
    );
    if !world.regions.iter().any(|(known, _)| *known == region) {
        return (422, error(422, "invalid input in field 'location'"));
    }
    if !world.sells(&region, &size) {
        return (422, error(422, "unsupported location for server type"));
    }
    if !world.images.contains(&image) {
        return (422, error(422, "invalid input in field 'image'"));
    }
    if world.servers.iter().any(|server| server.label == name) {
        return (
            409,
            json!({"error": {"code": "uniqueness_error", "message": "server name is already used", "details": {}}}),
        );
    }
    let tags = body["labels"]
        .as_object()
        .map(|labels| labels.keys().cloned().collect())
        .unwrap_or_default();
    let password = random_password();
    let server = world.make(&name, &region, &size, &image, tags, password.clone());
    (
        201,
        json!({
            "server": server_json(&server, false),
            "action": action("create_server")["action"],
            "next_actions": [],
            "root_password": password,
        }),
    )
}

fn with_server(
    world: &mut World,
    id: Option<u64>,
    act: impl FnOnce(&mut Server) -> Answer,
) -> Answer {
    match world
        .servers
        .iter_mut()
        .find(|server| Some(server.id) == id)
    {
        Some(server) => act(server),
        None => not_found(),
    }
}

/// The servers, or the account's other answers.
pub fn answer(asked: &Asked, world: &mut World) -> Answer {
    let segments = asked.segments();
    let id = |index: usize| -> Option<u64> { segments.get(index)?.parse().ok() };
    match (asked.method.as_str(), segments.as_slice()) {
        ("GET", ["servers"]) => {
            let wanted = asked.query("name").map(str::to_string);
            let ids: Vec<u64> = world
                .servers
                .iter()
                .filter(|server| wanted.as_ref().is_none_or(|name| server.label == *name))
                .map(|server| server.id)
                .collect();
            let rows = ids
                .into_iter()
                .filter_map(|id| world.look(id))
                .map(|(server, running)| server_json(&server, running))
                .collect();
            paged(asked, world, "servers", rows)
        }
        ("POST", ["servers"]) => create(asked, world),
        ("GET", ["servers", _]) => match id(1).and_then(|id| world.look(id)) {
            Some((server, running)) => (200, json!({"server": server_json(&server, running)})),
            None => not_found(),
        },
        ("DELETE", ["servers", _]) => {
            let before = world.servers.len();
            world.servers.retain(|server| Some(server.id) != id(1));
            if world.servers.len() == before {
                not_found()
            } else {
                (200, action("delete_server"))
            }
        }
        ("POST", ["servers", _, "actions", command]) => {
            let command = command.to_string();
            let body = asked.body.clone();
            with_server(world, id(1), |server| match command.as_str() {
                "poweron" => {
                    server.powered = true;
                    (201, action("start_server"))
                }
                "poweroff" => {
                    server.powered = false;
                    (201, action("stop_server"))
                }
                "reset_password" => {
                    server.root_password = random_password();
                    let mut answer = action("reset_password");
                    answer["root_password"] = json!(server.root_password);
                    (201, answer)
                }
                "change_dns_ptr" => {
                    server.rdns = body["dns_ptr"].as_str().map(str::to_string);
                    (201, action("change_dns_ptr"))
                }
                _ => not_found(),
            })
        }
        _ => account(asked, world),
    }
}

/// The account's other answers: the locations, server types, volumes and firewalls.
fn account(asked: &Asked, world: &mut World) -> Answer {
    let segments = asked.segments();
    let id = |index: usize| -> Option<u64> { segments.get(index)?.parse().ok() };
    match (asked.method.as_str(), segments.as_slice()) {
        ("GET", ["locations"]) => {
            let rows = world
                .regions
                .iter()
                .map(|(name, _)| json!({"name": name, "city": name, "country": "DE"}))
                .collect();
            paged(asked, world, "locations", rows)
        }
        ("GET", ["server_types"]) => {
            let mut names: Vec<String> = world
                .regions
                .iter()
                .flat_map(|(_, sizes)| sizes.clone())
                .collect();
            names.sort();
            names.dedup();
            let rows = names.iter().map(|name| {
                let prices: Vec<Value> = world.regions.iter().filter(|(_, sizes)| sizes.contains(name)).map(|(region, _)| json!({"location": region, "price_hourly": {"net": "0.0060", "gross": "0.0071"}})).collect();
                json!({"name": name, "cores": 2, "memory": 4.0, "disk": 40, "prices": prices, "deprecation": null})
            }).collect();
            paged(asked, world, "server_types", rows)
        }
        ("GET", ["volumes"]) => {
            let rows = world
                .volumes
                .iter()
                .map(|volume| {
                    json!({
                        "id": volume.id, "name": volume.label, "server": volume.attached_to,
                        "labels": labels(&volume.tags), "created": volume.created.to_rfc3339(),
                    })
                })
                .collect();
            paged(asked, world, "volumes", rows)
        }
        ("DELETE", ["volumes", _]) => {
            let before = world.volumes.len();
            world.volumes.retain(|volume| Some(volume.id) != id(1));
            if world.volumes.len() == before {
                not_found()
            } else {
                (204, Value::Null)
            }
        }
        ("GET", ["firewalls"]) => paged(asked, world, "firewalls", Vec::new()),
        _ => not_found(),
    }
}
