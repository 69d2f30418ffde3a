//! The provisioning pages in Chromium against a real plane (issue 29's browser test): the
//! provisioning service runs beside the plane's services with the Linode stand-in as its
//! provider. An admin adds a Linode account by the stand-in's token from the Cloud accounts
//! page (the token is never shown again, and no page or answer holds it), opens New server and
//! is offered exactly what the stand-in sells in each region; a level-8 operator sees no
//! provisioning action (no menu entry, no New server, no form) and every provisioning POST,
//! API or form, is refused at the door (403) while nothing is made.
//!
//! It also asks for a site from the form and finds it on its page at its first step with its
//! time, and on the dashboard's banner while it is in flight. The whole flow, to the node
//! online, is `provisioning_flow.rs`.

use capstan_e2e::plane::{Plane, TEST_SEAL_KEY};
use capstan_e2e::wait_for;
use capstan_events::Domain;
use capstan_provisioning::settings::ProvisioningSettings;
use capstan_provisioning::standin::{Flavor, StandIn};
use reqwest::StatusCode;
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::{Browser, Driver};

/// The provisioning service of a test plane, stopped when dropped.
pub(super) struct Provisioning {
    stop: CancellationToken,
}

impl Drop for Provisioning {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Starts the provisioning service on `plane`'s database and bus with `own` (its seal key the
/// test key), and waits until it answers its health.
pub(super) async fn provisioning(plane: &Plane, own: ProvisioningSettings) -> Provisioning {
    let stop = CancellationToken::new();
    let own = ProvisioningSettings {
        seal_key: Some(secrecy::SecretString::from(TEST_SEAL_KEY)),
        ..own
    };
    tokio::spawn(capstan_provisioning::run(
        plane.settings.clone(),
        own,
        stop.clone(),
    ));
    wait_for(
        "the provisioning service to answer its health",
        Duration::from_secs(60),
        || async {
            plane
                .bus
                .health(Domain::Provisioning, Duration::from_millis(500))
                .await
                .ok()
        },
    )
    .await;
    Provisioning { stop }
}

/// Adds the stand-in's account from the Cloud accounts page as the signed-in admin; its id.
pub(super) async fn add_account(browser: &Browser, plane: &Plane, label: &str, token: &str) -> i64 {
    browser.click("a[data-test=nav-cloud-accounts]").await;
    browser.wait_path("/ui/provisioning/accounts").await;
    browser
        .find("select[name=provider]")
        .await
        .select_by_value("linode")
        .await
        .unwrap();
    browser.fill("input[name=label]", label).await;
    browser
        .find("select[name=flag]")
        .await
        .select_by_value("main")
        .await
        .unwrap();
    browser.fill("input[name=token]", token).await;
    browser.click("button[data-test=add-account]").await;
    let flash = browser.text("[data-test=flash]").await;
    assert!(
        flash.contains(&format!("Cloud account {label} added")),
        "{flash}"
    );
    let (status, listed) = plane
        .api(&plane.admin, "GET", "/api/v1/provisioning/accounts", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert!(!listed.to_string().contains(token), "{listed}");
    let id = listed["accounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|account| account["label"] == label)
        .unwrap_or_else(|| panic!("no account {label}: {listed}"))["id"]
        .as_i64()
        .unwrap();
    browser.find(&format!("#account-{id}")).await;
    let flag = browser
        .find(&format!("#account-{id} [data-test=account-flag]"))
        .await;
    assert_eq!(
        flag.attr("data-flag").await.unwrap().as_deref(),
        Some("main")
    );
    id
}

/// The values of the New server form's plans (`<region> <size>`), in order.
async fn plans(browser: &Browser) -> Vec<String> {
    let values = browser
        .run(
            "return Array.from(document.querySelectorAll('select[name=plan] option'))
                    .map(option => option.value);",
        )
        .await;
    serde_json::from_value(values).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_adds_a_linode_account_and_is_offered_what_it_sells_and_level_8_sees_no_action() {
    // The test runs the provisioning service itself, pointed at its stand-in.
    let plane = Plane::start_without(&[Domain::Provisioning], &[]).await;
    let linode = StandIn::start(Flavor::Linode).await;
    let token = linode.world().token.clone();
    let _provisioning = provisioning(
        &plane,
        ProvisioningSettings {
            linode_base_url: linode.base_url(),
            plane_url: Some(plane.base.clone()),
            ..ProvisioningSettings::default()
        },
    )
    .await;

    let driver = Driver::start().await;
    let base = plane.base.replace("127.0.0.1", "localhost");
    let ada = plane.operator("ada").clone();
    let browser = driver.browser("ada").await;
    browser.sign_in(&base, ada.name, &ada.password).await;

    // A token the provider refuses is refused, and said so; nothing is added.
    browser.click("a[data-test=nav-cloud-accounts]").await;
    browser.wait_path("/ui/provisioning/accounts").await;
    browser.find("[data-test=no-accounts]").await;
    browser.fill("input[name=label]", "wrong").await;
    browser.fill("input[name=token]", "not-the-token").await;
    browser.click("button[data-test=add-account]").await;
    let flash = browser.find("[data-test=flash]").await;
    assert_eq!(
        flash.attr("data-kind").await.unwrap().as_deref(),
        Some("error"),
        "{}",
        flash.text().await.unwrap()
    );
    browser.find("[data-test=no-accounts]").await;

    // The stand-in's token is taken, sealed and never shown again.
    let account = add_account(&browser, &plane, "linode-main", &token).await;
    let source = browser.client.source().await.unwrap();
    assert!(
        !source.contains(&token),
        "the accounts page shows the token"
    );
    let controls = browser.unreachable_or_unnamed_controls().await;
    assert!(controls.is_empty(), "the accounts page: {controls:?}");

    // New server: the account is chosen, and its plans are what the stand-in sells.
    browser.click("a[data-test=nav-provisioning]").await;
    browser.wait_path("/ui/provisioning").await;
    browser.find("[data-test=tab-main]").await;
    browser.click("a[data-test=new-server]").await;
    browser.wait_path("/ui/provisioning/new").await;
    browser.find("form#new-server").await;
    let offered = plans(&browser).await;
    let sold: Vec<String> = linode
        .world()
        .regions
        .iter()
        .flat_map(|(region, sizes)| sizes.iter().map(move |size| format!("{region} {size}")))
        .collect();
    let (mut offered_sorted, mut sold_sorted) = (offered.clone(), sold.clone());
    offered_sorted.sort();
    sold_sorted.sort();
    assert_eq!(offered_sorted, sold_sorted, "offered {offered:?}");
    let hidden = browser
        .find("form#new-server input[name=account_id]")
        .await
        .attr("value")
        .await
        .unwrap();
    assert_eq!(hidden, Some(account.to_string()));
    let controls = browser.unreachable_or_unnamed_controls().await;
    assert!(controls.is_empty(), "the New server form: {controls:?}");
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");

    // Asked for: the provision's page, its first step with its time, the dashboard's banner.
    browser
        .find("select[name=kind]")
        .await
        .select_by_value("site")
        .await
        .unwrap();
    browser
        .find("select[name=plan]")
        .await
        .select_by_value("us-east g6-nanode-1")
        .await
        .unwrap();
    browser.fill("input[name=name]", "shop-1").await;
    browser.click("button[data-test=request-provision]").await;
    let path = browser.wait_path("/ui/provisioning/provisions/").await;
    let provision: i64 = path
        .trim_start_matches("/ui/provisioning/provisions/")
        .parse()
        .unwrap();
    let flash = browser.text("[data-test=flash]").await;
    assert!(flash.contains("Server shop-1 asked for"), "{flash}");
    browser.find("#step-1[data-step=requested] time").await;
    let (status, view) = plane
        .api(
            &plane.reader,
            "GET",
            &format!("/api/v1/provisioning/provisions/{provision}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(
        (&view["name"], &view["kind"], &view["region"], &view["size"]),
        (
            &json!("shop-1"),
            &json!("site"),
            &json!("us-east"),
            &json!("g6-nanode-1")
        )
    );
    let controls = browser.unreachable_or_unnamed_controls().await;
    assert!(controls.is_empty(), "a provision's page: {controls:?}");
    let (_, in_flight) = plane
        .api(
            &plane.reader,
            "GET",
            "/api/v1/provisioning/provisions?in_flight=true",
            None,
        )
        .await;
    if in_flight["provisions"]
        .as_array()
        .is_some_and(|rows| rows.iter().any(|row| row["id"] == provision))
    {
        browser.goto(&format!("{base}/ui/")).await;
        browser
            .find(&format!(
                "[data-test=provisions-banner] #banner-provision-{provision}"
            ))
            .await;
    }
    let errors = browser.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");

    // Wide and narrow: nothing scrolls sideways on a phone-sized window.
    for (width, height, suffix) in [(1280, 900, ""), (390, 844, "-narrow")] {
        browser.client.set_window_size(width, height).await.unwrap();
        for (page, name) in [
            ("/ui/provisioning/accounts".to_string(), "cloud-accounts"),
            ("/ui/provisioning".to_string(), "provisions"),
            ("/ui/provisioning/new".to_string(), "new-server"),
            (
                format!("/ui/provisioning/provisions/{provision}"),
                "provision",
            ),
        ] {
            browser.goto(&format!("{base}{page}")).await;
            browser.find("h1").await;
            assert!(
                browser.fits_width().await,
                "{page} scrolls sideways at {width} px"
            );
            browser.screenshot(&format!("{name}{suffix}")).await;
        }
    }
    browser.client.set_window_size(1280, 900).await.unwrap();

    // A level-8 operator reads the provisions and sees no provisioning action.
    let chris = plane.operator("chris").clone();
    let changer = driver.browser("chris").await;
    changer.sign_in(&base, chris.name, &chris.password).await;
    changer.click("a[data-test=nav-provisioning]").await;
    changer.wait_path("/ui/provisioning").await;
    changer.find("[data-test=tab-main]").await;
    assert_eq!(changer.count("a[data-test=new-server]").await, 0);
    assert_eq!(changer.count("a[data-test=nav-cloud-accounts]").await, 0);
    assert_eq!(
        changer
            .count("form[action^='/ui/provisioning'][method=post]")
            .await,
        0
    );
    changer.find(&format!("#provision-{provision}")).await;
    changer
        .goto(&format!("{base}/ui/provisioning/provisions/{provision}"))
        .await;
    changer.find("[data-test=provision-step]").await;
    assert_eq!(
        changer
            .count("form[action^='/ui/provisioning'][method=post]")
            .await,
        0
    );
    changer
        .goto(&format!("{base}/ui/provisioning/accounts"))
        .await;
    changer.find("[data-test=error]").await;
    changer.goto(&format!("{base}/ui/provisioning/new")).await;
    changer.find("[data-test=error]").await;
    assert_eq!(changer.count("form#new-server").await, 0);

    // ... and every provisioning POST refuses it, API and form alike, making nothing.
    for (method, path, body) in [
        (
            "POST",
            "/api/v1/provisioning/accounts".to_string(),
            json!({"provider": "linode", "label": "mine", "flag": "main", "token": token}),
        ),
        (
            "POST",
            "/api/v1/provisioning/provisions".to_string(),
            json!({"account_id": account, "kind": "site", "name": "shop-8",
                   "region": "us-east", "size": "g6-nanode-1"}),
        ),
        (
            "POST",
            format!("/api/v1/provisioning/provisions/{provision}/retry"),
            json!({}),
        ),
        (
            "DELETE",
            format!("/api/v1/provisioning/accounts/{account}"),
            json!({}),
        ),
    ] {
        let (status, answer) = plane.api(&plane.changer, method, &path, Some(body)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
    }
    // The New server form, posted from chris's own session with its CSRF token.
    changer.goto(&format!("{base}/ui/provisioning")).await;
    changer
        .run(&format!(
            "const form = document.createElement('form');
             form.method = 'post';
             form.action = '/ui/provisioning/provisions';
             const fields = {{csrf: document.querySelector('input[name=csrf]').value,
                             account_id: '{account}', kind: 'site',
                             plan: 'us-east g6-nanode-1', name: 'shop-8'}};
             for (const [name, value] of Object.entries(fields)) {{
               const input = document.createElement('input');
               input.type = 'hidden'; input.name = name; input.value = value;
               form.appendChild(input);
             }}
             document.body.appendChild(form);
             form.submit();
             return true;"
        ))
        .await;
    let refusal = changer.text("[data-test=error]").await;
    assert!(refusal.contains("level"), "{refusal}");
    let (_, listed) = plane
        .api(&plane.admin, "GET", "/api/v1/provisioning/accounts", None)
        .await;
    assert_eq!(listed["accounts"].as_array().unwrap().len(), 1, "{listed}");
    let (status, provisions) = plane
        .api(
            &plane.reader,
            "GET",
            "/api/v1/provisioning/provisions",
            None,
        )
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "level 7 reads provisions: {provisions}"
    );
    assert_eq!(
        provisions["provisions"].as_array().unwrap().len(),
        1,
        "only ada's: {provisions}"
    );

    changer.close().await;
    browser.close().await;
}
