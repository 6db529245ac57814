//! What one request of each kind costs the kube-apiserver, in CPU: a plain create (the
//! floor's write, and the translators' write of a new Translation), a server-side apply (for
//! comparison: what creating outright saves), and the pusher's status write. Sent one at a
//! time in a scratch namespace with no controllers running, over a sample of the scenario's
//! own Translations shaped as the translators write them (labels, finalizer, an owner: a
//! ConfigMap there), so that the figures explain the ratio convergence ÷ floor: every
//! Translation costs the controllers a create and a status write where it costs the floor
//! one create (`docs/benchmark.md`).

use std::fmt::Debug;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Endpoints, Namespace, Node, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource as _, ResourceExt};
use midonet_kube_controllers::crd::{
    Condition, PushedResource, Translation, TranslationStatus, BODY_HASH_HEX, SPEC_HASH_HEX,
};
use midonet_kube_controllers::{pusher, translate};
use midonet_translators::{DesiredTranslation, Resource};
use serde::de::DeserializeOwned;

use crate::objects::each_concurrent;
use crate::Res;

/// Apiserver CPU per request of each kind.
pub struct RequestCosts {
    pub create: Duration,
    pub apply: Duration,
    pub status: Duration,
    /// An event as the controllers record one about a namespaced object (events.k8s.io,
    /// a new event each time).
    pub event: Duration,
    /// The controllers' reading of the cluster at their start, which the floors do not
    /// make: one paged LIST (500 a page, as their caches ask) of each kind they translate
    /// or select by (Nodes, Pods, Services, Endpoints, Namespaces, NetworkPolicies;
    /// their own Translations' LIST the floors' watch makes too).
    pub cluster_read: Duration,
}

/// Rounds of the cluster read measured; their mean is reported.
const READ_ROUNDS: u32 = 5;

/// The field managers the controllers use, so that the apiserver tracks the same fields.
const TRANSLATORS: &str = translate::FIELD_MANAGER;
const PUSHER: &str = pusher::FIELD_MANAGER;

/// A create as the translators write it (their field manager).
pub fn translators_params() -> PostParams {
    PostParams {
        field_manager: Some(TRANSLATORS.into()),
        ..PostParams::default()
    }
}

/// A status write as the pusher writes it (its field manager).
pub fn pusher_params() -> PostParams {
    PostParams {
        field_manager: Some(PUSHER.into()),
        ..PostParams::default()
    }
}

/// A hash as long as the pusher's of that kind.
fn placeholder_hash(hex_digits: usize) -> String {
    "0123456789abcdef"
        .chars()
        .cycle()
        .take(hex_digits)
        .collect()
}

/// A status shaped like the pusher's after a complete push.
fn pushed_status(t: &Translation) -> TranslationStatus {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let pushed: Vec<PushedResource> = t
        .desired_resources()
        .iter()
        .filter_map(|e| Resource::from_entry(e).ok())
        .map(|r| PushedResource {
            kind: r.kind().to_string(),
            path: r.item_path(),
            body_hash: placeholder_hash(BODY_HASH_HEX),
        })
        .collect();
    TranslationStatus {
        observed_generation: t.metadata.generation,
        pushed_hash: Some(placeholder_hash(SPEC_HASH_HEX)),
        resource_count: Some(pushed.len() as i64),
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "Pushed".into(),
            message: String::new(),
            last_transition_time: Some(now.clone()),
            observed_generation: t.metadata.generation,
        }],
        pushed,
        last_push_time: Some(now),
    }
}

/// Writes `t`'s status as the pusher would after a complete push. A 409 (the Translation
/// changed since `t` was read) is an error naming it: the bench is its only writer here, so
/// another one competes (a pusher still running), which a retry would hide.
pub async fn write_pushed_status(
    api: &Api<Translation>,
    mut t: Translation,
    params: &PostParams,
) -> Res<()> {
    t.status = Some(pushed_status(&t));
    // Sent without them, the apiserver keeps the stored ones, as for the pusher.
    t.metadata.managed_fields = None;
    let name = t.name_any();
    match api.replace_status(&name, params, &t).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(format!(
            "the status write of Translation {}/{name} met 409 Conflict ({}): another writer \
             changed it since the bench wrote it; is a pusher still running?",
            t.namespace().unwrap_or_default(),
            e.message
        )
        .into()),
        Err(e) => Err(e.into()),
    }
}

/// Removes every finalizer of Translation `name`, so that deleting it needs no pusher.
pub async fn remove_finalizers(api: &Api<Translation>, name: &str) -> Res<()> {
    let unfinalized = serde_json::json!({"metadata": {"finalizers": null}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&unfinalized))
        .await?;
    Ok(())
}

/// Requests of one kind between two readings of the apiserver's CPU time, which the kernel
/// accounts in 10 ms ticks: a block spans several ticks where one request spans a fraction.
const BLOCK: usize = 20;

/// Measures `samples` requests of each kind (spread over `translations`) in `namespace`,
/// which it leaves empty. `cpu` reads the apiserver's CPU time.
pub async fn measure(
    client: &Client,
    namespace: &str,
    translations: &[&DesiredTranslation],
    samples: usize,
    cpu: impl Fn() -> Res<Duration>,
) -> Res<RequestCosts> {
    let api: Api<Translation> = Api::namespaced(client.clone(), namespace);
    let owners: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("bench-cost-owner".into());
    let owner = owners.create(&PostParams::default(), &owner).await?;
    let owner_ref = translate::owner_reference(&owner).ok_or("owner without a UID")?;
    // A desired Translation written as the translators write it, under another name here.
    let shaped = |d: &DesiredTranslation, name: String| {
        let mut d = d.clone();
        d.name = name;
        d.namespace = namespace.to_string();
        translate::translation_object(&d, Some(&owner_ref))
    };
    let sample: Vec<(usize, &DesiredTranslation)> = translations
        .iter()
        .copied()
        .cycle()
        .take(if translations.is_empty() { 0 } else { samples })
        .enumerate()
        .collect();
    let n = sample.len().max(1) as u32;
    let spent = measure_writes(&api, &sample, shaped, &cpu).await?;
    // The finalizer first, or the deletion would wait for a pusher.
    let written = api.list(&ListParams::default()).await?.items;
    each_concurrent(written, 16, |t| {
        let api = api.clone();
        async move { remove_finalizers(&api, &t.name_any()).await }
    })
    .await?;
    api.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    let events = samples / 5;
    let event = measure_events(client, &owner, events, &cpu).await? / events.max(1) as u32;
    owners
        .delete(&owner.name_any(), &DeleteParams::default())
        .await?;
    Ok(RequestCosts {
        create: spent[0] / n,
        apply: spent[1] / n,
        status: spent[2] / n,
        event,
        cluster_read: measure_cluster_read(client, &cpu).await?,
    })
}

/// The apiserver's CPU over the creates, the applies and the status writes of `sample`
/// (each Translation `shaped` under a name of its number), a block of each kind per round,
/// so that background work in the apiserver falls on all three alike.
async fn measure_writes(
    api: &Api<Translation>,
    sample: &[(usize, &DesiredTranslation)],
    shaped: impl Fn(&DesiredTranslation, String) -> Translation,
    cpu: &impl Fn() -> Res<Duration>,
) -> Res<[Duration; 3]> {
    let (create_params, status_params) = (translators_params(), pusher_params());
    let apply_params = PatchParams::apply(TRANSLATORS).force();
    let mut spent = [Duration::ZERO; 3];
    for block in sample.chunks(BLOCK) {
        let c0 = cpu()?;
        for (i, d) in block {
            api.create(&create_params, &shaped(d, format!("cost-create-{i}")))
                .await?;
        }
        let c1 = cpu()?;
        let mut applied = Vec::with_capacity(block.len());
        for (i, d) in block {
            let name = format!("cost-apply-{i}");
            let t = shaped(d, name.clone());
            applied.push(api.patch(&name, &apply_params, &Patch::Apply(&t)).await?);
        }
        let c2 = cpu()?;
        for t in applied {
            write_pushed_status(api, t, &status_params).await?;
        }
        let c3 = cpu()?;
        spent[0] += c1 - c0;
        spent[1] += c2 - c1;
        spent[2] += c3 - c2;
    }
    Ok(spent)
}

/// The apiserver's CPU over `count` events about `owner`, in blocks of [`BLOCK`]; each is
/// written by a recorder of its own with a note of its own, so each is a create, as the
/// controllers' routine events are.
async fn measure_events(
    client: &Client,
    owner: &ConfigMap,
    count: usize,
    cpu: &impl Fn() -> Res<Duration>,
) -> Res<Duration> {
    let reporter = Reporter {
        controller: TRANSLATORS.into(),
        instance: None,
    };
    let reference = owner.object_ref(&());
    let mut spent = Duration::ZERO;
    for start in (0..count).step_by(BLOCK) {
        let c0 = cpu()?;
        for i in start..(start + BLOCK).min(count) {
            let event = Event {
                type_: EventType::Normal,
                reason: "Translated".into(),
                note: Some(format!("bench cost event {i}")),
                action: "Translated".into(),
                secondary: None,
            };
            Recorder::new(client.clone(), reporter.clone())
                .publish(&event, &reference)
                .await?;
        }
        spent += cpu()? - c0;
    }
    Ok(spent)
}

/// The apiserver's CPU over one paged LIST of each kind the controllers list at their
/// start: the mean of [`READ_ROUNDS`] rounds.
async fn measure_cluster_read(client: &Client, cpu: &impl Fn() -> Res<Duration>) -> Res<Duration> {
    let c0 = cpu()?;
    for _ in 0..READ_ROUNDS {
        list_paged::<Node>(client).await?;
        list_paged::<Pod>(client).await?;
        list_paged::<Service>(client).await?;
        list_paged::<Endpoints>(client).await?;
        list_paged::<Namespace>(client).await?;
        list_paged::<NetworkPolicy>(client).await?;
    }
    Ok((cpu()? - c0) / READ_ROUNDS)
}

/// Lists every `K` in pages of 500, as a kube-runtime watcher lists.
async fn list_paged<K>(client: &Client) -> Res<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}
