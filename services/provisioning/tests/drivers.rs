//! The two provider drivers against the stand-ins of their published APIs (issue 29): the
//! retry rule (429 with Retry-After, 5xx, timeouts), a create made once whatever the provider
//! answered, pagination, bad answers, a refused token kept out of the error, the offer, and the
//! account's reads and deletes.

use std::time::Duration;

use capstan_provisioning::domain::offer::check_size;
use capstan_provisioning::drivers::api::{http, Limits};
use capstan_provisioning::drivers::hetzner::Hetzner;
use capstan_provisioning::drivers::linode::Linode;
use capstan_provisioning::drivers::{CloudProvider, CreateInstance, Power, ProviderError, Status};
use capstan_provisioning::standin::{Fault, Flavor, StandIn};
use secrecy::{ExposeSecret, SecretString};

fn quick() -> Limits {
    Limits {
        call_timeout: Duration::from_secs(5),
        attempts: 5,
        first_wait: Duration::from_millis(20),
        longest_wait: Duration::from_secs(3),
    }
}

fn driver_with(standin: &StandIn, token: &str, limits: Limits) -> Box<dyn CloudProvider> {
    let token = SecretString::from(token);
    match standin.flavor {
        Flavor::Linode => {
            Box::new(Linode::new(&standin.base_url(), token, http(), limits).unwrap())
        }
        Flavor::Hetzner => {
            Box::new(Hetzner::new(&standin.base_url(), token, http(), limits).unwrap())
        }
    }
}

fn driver(standin: &StandIn) -> Box<dyn CloudProvider> {
    driver_with(standin, "standin-token", quick())
}

fn request(flavor: Flavor, label: &str) -> CreateInstance {
    let (region, size, image) = match flavor {
        Flavor::Linode => ("us-east", "g6-standard-2", "linode/debian12"),
        Flavor::Hetzner => ("fsn1", "cx22", "debian-12"),
    };
    CreateInstance {
        label: label.into(),
        region: region.into(),
        size: size.into(),
        image: image.into(),
        disk_encryption: Some(false),
        swap_mb: Some(0),
        tags: vec!["capstan".into()],
        root_password: SecretString::from("a-long-root-password-1"),
    }
}

const BOTH: [Flavor; 2] = [Flavor::Linode, Flavor::Hetzner];

fn create_path(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::Linode => "/v4/linode/instances",
        Flavor::Hetzner => "/v1/servers",
    }
}

#[tokio::test]
async fn a_provider_answering_429_then_500_then_success_still_creates_once() {
    for flavor in BOTH {
        let standin = StandIn::start(flavor).await;
        standin.misbehave([
            Fault::RateLimited {
                retry_after_secs: 1,
            },
            Fault::ServerError,
        ]);
        let started = std::time::Instant::now();
        let created = driver(&standin)
            .create(&request(flavor, "capstan-1-shop"))
            .await
            .unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{flavor:?}: Retry-After was waited out"
        );
        let world = standin.world();
        assert_eq!(world.servers.len(), 1, "{flavor:?}: made once");
        assert_eq!(created.instance.id, world.servers[0].id.to_string());
        assert_eq!(
            created.root_password.expose_secret(),
            world.servers[0].root_password
        );
        drop(world);
        assert_eq!(standin.count("POST", create_path(flavor)), 3, "{flavor:?}");
    }
}

#[tokio::test]
async fn a_create_that_was_made_but_answered_500_is_found_again_not_made_twice() {
    for flavor in BOTH {
        let standin = StandIn::start(flavor).await;
        standin.misbehave([Fault::ServerErrorAfterActing]);
        let created = driver(&standin)
            .create(&request(flavor, "capstan-2-shop"))
            .await
            .unwrap();
        let world = standin.world();
        assert_eq!(world.servers.len(), 1, "{flavor:?}");
        // Hetzner's password went with the lost answer: the driver asked for a new one.
        assert_eq!(
            created.root_password.expose_secret(),
            world.servers[0].root_password,
            "{flavor:?}"
        );
        drop(world);
        assert_eq!(standin.count("POST", create_path(flavor)), 1, "{flavor:?}");
    }
}

#[tokio::test]
async fn an_instance_reports_running_at_its_own_loopback_address_or_never_when_switched() {
    for flavor in BOTH {
        let standin = StandIn::start(flavor).await;
        let provider = driver(&standin);
        let created = provider
            .create(&request(flavor, "capstan-3-a"))
            .await
            .unwrap();
        assert!(
            matches!(created.instance.status, Status::Starting(_)),
            "{flavor:?}"
        );
        let first = provider.get(&created.instance.id).await.unwrap();
        assert!(matches!(first.status, Status::Starting(_)), "{flavor:?}");
        let second = provider.get(&created.instance.id).await.unwrap();
        assert_eq!(second.status, Status::Running, "{flavor:?}");
        assert!(
            second.ipv4[0].is_loopback(),
            "{flavor:?}: {:?}",
            second.ipv4
        );
        assert_eq!(second.ipv4[0], standin.world().servers[0].ipv4);

        standin.world().never_running = true;
        let stuck = provider
            .create(&request(flavor, "capstan-3-b"))
            .await
            .unwrap();
        for _ in 0..5 {
            let looked = provider.get(&stuck.instance.id).await.unwrap();
            assert_ne!(looked.status, Status::Running, "{flavor:?}");
        }
        provider
            .power(&created.instance.id, Power::Off)
            .await
            .unwrap();
        assert!(!standin.world().servers[0].powered, "{flavor:?}");
    }
}

#[tokio::test]
async fn listings_follow_every_page() {
    for flavor in BOTH {
        let standin = StandIn::start(flavor).await;
        let provider = driver(&standin);
        for index in 0..3 {
            provider
                .create(&request(flavor, &format!("capstan-4-{index}")))
                .await
                .unwrap();
        }
        standin.world().page_cap = 1;
        let listed = provider.list().await.unwrap();
        let labels: Vec<&str> = listed
            .iter()
            .map(|instance| instance.label.as_str())
            .collect();
        assert_eq!(
            labels,
            ["capstan-4-0", "capstan-4-1", "capstan-4-2"],
            "{flavor:?}"
        );
        assert!(
            standin
                .world()
                .requests
                .iter()
                .any(|request| request.contains("page=3")),
            "{flavor:?}"
        );
    }
}

#[tokio::test]
async fn a_slow_answer_times_out_and_is_tried_again_within_the_bound() {
    for flavor in BOTH {
        let standin = StandIn::start(flavor).await;
        let limits = Limits {
            call_timeout: Duration::from_millis(300),
            attempts: 1,
            ..quick()
        };
        standin.misbehave([Fault::Slow(Duration::from_secs(2))]);
        let error = driver_with(&standin, "standin-token", limits)
            .list()
            .await
            .unwrap_err();
        assert!(
            matches!(error, ProviderError::Timeout(_)),
            "{flavor:?}: {error}"
        );
        standin.misbehave([Fault::Slow(Duration::from_secs(2))]);
        let retried = driver_with(
            &standin,
            "standin-token",
            Limits {
                attempts: 2,
                ..limits
            },
        );
        assert!(retried.list().await.is_ok(), "{flavor:?}");
    }
}

#[tokio::test]
async fn bad_json_a_refused_token_a_missing_instance_and_a_long_retry_after_are_told_apart() {
    for flavor in BOTH {
        let standin = StandIn::start(flavor).await;
        let provider = driver_with(
            &standin,
            "standin-token",
            Limits {
                attempts: 1,
                ..quick()
            },
        );
        standin.misbehave([Fault::BadJson]);
        assert!(
            matches!(provider.list().await, Err(ProviderError::BadAnswer(_))),
            "{flavor:?}"
        );

        let wrong = driver_with(&standin, "wrong-token-xyz", quick());
        let refused = wrong.list().await.unwrap_err();
        assert!(
            matches!(refused, ProviderError::Refused { status: 401, .. }),
            "{flavor:?}: {refused}"
        );
        assert!(
            !refused.to_string().contains("wrong-token-xyz"),
            "{refused}"
        );
        assert!(
            !format!("{refused:?}").contains("wrong-token-xyz"),
            "{refused:?}"
        );

        assert!(
            matches!(
                provider.get("999999").await,
                Err(ProviderError::NotFound(_))
            ),
            "{flavor:?}"
        );

        standin.misbehave([Fault::RateLimited {
            retry_after_secs: 3600,
        }]);
        let started = std::time::Instant::now();
        let limited = driver(&standin).list().await.unwrap_err();
        assert!(
            matches!(limited, ProviderError::RateLimited { .. }),
            "{flavor:?}: {limited}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "an hour's Retry-After is not waited"
        );

        let rejected = provider
            .create(&CreateInstance {
                size: "no-such-size".into(),
                ..request(flavor, "x")
            })
            .await
            .unwrap_err();
        assert!(
            matches!(rejected, ProviderError::Rejected { .. }),
            "{flavor:?}: {rejected}"
        );
        assert!(standin.world().servers.is_empty());
    }
}

#[tokio::test]
async fn the_offer_lists_each_regions_sizes_and_a_size_not_sold_there_is_refused() {
    for flavor in BOTH {
        let standin = StandIn::start(flavor).await;
        let offer = driver(&standin).offer().await.unwrap();
        let (region, small_only, big) = match flavor {
            Flavor::Linode => ("us-east", "eu-west", "g6-standard-2"),
            Flavor::Hetzner => ("fsn1", "hel1", "cx32"),
        };
        assert_eq!(offer.len(), 2, "{flavor:?}: {offer:?}");
        assert!(check_size(&offer, region, big).is_ok(), "{flavor:?}");
        let refused = check_size(&offer, small_only, big).unwrap_err();
        assert!(refused.to_string().contains("it sells:"), "{refused}");
    }
}

#[tokio::test]
async fn company_name_reverse_dns_volumes_and_deletes_reach_the_account() {
    for flavor in BOTH {
        let standin = StandIn::start(flavor).await;
        standin.world().company = "Joinery Test disposable".into();
        let provider = driver(&standin);
        let company = provider.company_name().await;
        match flavor {
            Flavor::Linode => assert_eq!(company.unwrap(), "Joinery Test disposable"),
            Flavor::Hetzner => assert!(matches!(company, Err(ProviderError::Unusable(_)))),
        }
        let made = provider
            .create(&request(flavor, "capstan-6-a"))
            .await
            .unwrap();
        provider
            .set_reverse_dns(&made.instance.id, made.instance.ipv4[0], "shop.example.com")
            .await
            .unwrap();
        assert_eq!(
            standin.world().servers[0].rdns.as_deref(),
            Some("shop.example.com"),
            "{flavor:?}"
        );

        let old = standin.add_volume("old", None, &["KEEP"], chrono::Duration::hours(48));
        standin.add_volume("attached", Some(1), &[], chrono::Duration::hours(48));
        let volumes = provider.volumes().await.unwrap();
        assert_eq!(volumes.len(), 2);
        assert_eq!(volumes[0].tags, ["KEEP"], "{flavor:?}");
        assert_eq!(volumes[1].attached_to.as_deref(), Some("1"), "{flavor:?}");
        provider.delete_volume(&old.to_string()).await.unwrap();
        assert_eq!(standin.world().volumes.len(), 1);
        provider.delete_instance(&made.instance.id).await.unwrap();
        assert!(standin.world().servers.is_empty(), "{flavor:?}");
        assert!(provider.firewalls().await.unwrap().is_empty());
    }
}
