//! The flow probe judges again only the flows whose traces read what a batch of changes
//! touched (`midonet_dataplane::reads`), and keeps the ARP exchanges the batch did not
//! touch. Both are held here to a full judgement on a topology rebuilt from scratch, after
//! every batch of a version bump done record by record: the new version built beside the
//! old one, each node's bindings moved (with a batch in between where they are on
//! neither), the old version retired, then an address group's member and a chain's rules
//! changed on their own.

use std::collections::BTreeMap;

use midonet_dataplane::{Changes, LiveTopology, RecordChange, RuleOrder, Topology};
use midonet_testkit::probe::{judge_all, select_flows, ProbeFlow, SampleSize, Verdicts};
use midonet_testkit::scenario::{Scale, Scenario};
use std::net::Ipv4Addr;

use midonet_translators::model::{Ipv4Cidr, Resource, Route};
use midonet_translators::TranslatorConfig;
use uuid::Uuid;

type Records = BTreeMap<String, Vec<Resource>>;

fn is_binding(rec: &[Resource]) -> bool {
    matches!(rec, [Resource::HostInterfacePort(_)])
}

fn host_of(rec: &[Resource]) -> Option<uuid::Uuid> {
    match rec {
        [Resource::HostInterfacePort(b)] => Some(b.parent),
        _ => None,
    }
}

/// The probe's verdicts kept up to date batch by batch, against a full judgement.
struct Run {
    flows: Vec<ProbeFlow>,
    attachments: Vec<midonet_dataplane::Attachment>,
    live: LiveTopology,
    current: Records,
    verdicts: Verdicts,
    judged: usize,
    batches: usize,
    /// Batches after which some flow was not ok.
    some_down: usize,
}

impl Run {
    fn new(flows: Vec<ProbeFlow>, attachments: Vec<midonet_dataplane::Attachment>) -> Run {
        let live = LiveTopology::new(attachments.clone());
        let verdicts = Verdicts::of(live.topology(), &flows);
        Run {
            flows,
            attachments,
            live,
            current: Records::new(),
            verdicts,
            judged: 0,
            batches: 0,
            some_down: 0,
        }
    }

    fn apply(&mut self, what: &str, batch: Vec<RecordChange>) {
        for (key, rec) in &batch {
            match rec {
                Some(r) => self.current.insert(key.clone(), r.clone()),
                None => self.current.remove(key),
            };
        }
        let touched: Changes = self.live.apply(batch);
        self.judged += self
            .verdicts
            .update(self.live.topology(), &self.flows, &touched);
        self.batches += 1;
        let rebuilt = Topology::new(
            self.current.values().flatten().cloned(),
            RuleOrder::Listed,
            self.attachments.clone(),
        );
        let full = judge_all(&rebuilt, &self.flows);
        if full.iter().any(Result::is_err) {
            self.some_down += 1;
        }
        for ((f, kept), fresh) in self.flows.iter().zip(self.verdicts.ok()).zip(&full) {
            assert_eq!(&kept, fresh, "after {what}: {}", f.name());
        }
    }

    fn put(&mut self, what: &str, recs: Vec<(&String, &Vec<Resource>)>) {
        let batch = recs
            .into_iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        self.apply(what, batch);
    }

    fn gone(&mut self, what: &str, keys: Vec<&String>) {
        self.apply(what, keys.into_iter().map(|k| (k.clone(), None)).collect());
    }
}

#[test]
fn judging_again_only_what_a_change_touched_gives_a_full_judgement() {
    let scale = Scale {
        nodes: 3,
        pods: 12,
        services: 4,
        endpoints_per_service: 2,
        namespaces: 2,
    };
    let scenario = Scenario::new("pc", scale);
    let old = scenario.translated(4).unwrap();
    let cfg = TranslatorConfig {
        version: "9".into(),
        ..TranslatorConfig::default()
    };
    let new = scenario.translated_with(&cfg, 4).unwrap();
    let (v1, v2) = (old.records("v1"), new.records("v2"));
    let size = SampleSize {
        services_per_source: 10,
        peers_per_source: 10,
    };
    let flows = select_flows(&old.cluster, size);
    assert!(flows.len() >= 12, "{} flows", flows.len());
    let mut run = Run::new(flows, old.cluster.attachments());

    run.put("the old version", v1.iter().collect());
    assert!(run.verdicts.ok().iter().all(Result::is_ok));
    // The new version beside it, in three parts, its bindings held back.
    let built: Vec<_> = v2.iter().filter(|(_, r)| !is_binding(r)).collect();
    for part in built.chunks(built.len().div_ceil(3)) {
        run.put("a part of the new version", part.to_vec());
    }
    // Each host's bindings: off the old ports, then onto the new ones.
    let hosts: std::collections::BTreeSet<_> = v2.values().filter_map(|r| host_of(r)).collect();
    for h in hosts {
        let on_h = |recs: &Records| -> Vec<String> {
            recs.iter()
                .filter(|(_, r)| host_of(r) == Some(h))
                .map(|(k, _)| k.clone())
                .collect()
        };
        run.gone("a host's old bindings", on_h(&v1).iter().collect());
        let moved = on_h(&v2);
        run.put(
            "a host's new bindings",
            v2.iter().filter(|(k, _)| moved.contains(k)).collect(),
        );
    }
    // The old version retired, in three parts.
    let retired: Vec<&String> = v1.keys().filter(|k| run.current.contains_key(*k)).collect();
    for part in retired.chunks(retired.len().div_ceil(3)) {
        run.gone("a part of the old version", part.to_vec());
    }
    assert!(run.verdicts.ok().iter().all(Result::is_ok));
    // An address group's member out and back; a chain's rules emptied and back.
    let member = v2
        .iter()
        .find(|(_, r)| matches!(r.as_slice(), [Resource::IpAddrGroupAddr(_)]))
        .map(|(k, r)| (k.clone(), r.clone()))
        .unwrap();
    run.gone("an address group's member", vec![&member.0]);
    run.put(
        "an address group's member back",
        vec![(&member.0, &member.1)],
    );
    let chain = v2
        .iter()
        .filter(|(k, r)| k.contains("/chain/") && r.len() > 2)
        .map(|(k, r)| (k.clone(), r.clone()))
        .next_back()
        .unwrap();
    let emptied = vec![chain.1[0].clone()];
    run.put("a chain emptied", vec![(&chain.0, &emptied)]);
    run.put("a chain's rules back", vec![(&chain.0, &chain.1)]);

    eprintln!(
        "STATS judged {} batches {} flows {} some_down {}",
        run.judged,
        run.batches,
        run.flows.len(),
        run.some_down
    );
    // Not vacuous: flows went down and came back, and the bump's batches judged fewer
    // than half the flows (a router's routes, below, are read by every flow).
    assert!(run.some_down > 0, "no batch took a flow down");
    let every = run.batches * run.flows.len();
    assert!(
        run.judged * 2 < every,
        "{} of {every} flow judgements made",
        run.judged
    );
    route_and_router_port_changes(&mut run, &v2);
}

/// A router's routes changed without its walks' ports changing: a /32 route to a pod of one
/// node's network sent through the port of another's (the pod unreachable), then gone; the
/// router port behind one node's network out (its routes unpublished) and back.
fn route_and_router_port_changes(run: &mut Run, v2: &Records) {
    let to_nodes: Vec<Route> = v2
        .values()
        .filter_map(|r| match r.as_slice() {
            [Resource::Route(x)] if x.dst_network_length == Some(24) => Some(x.clone()),
            _ => None,
        })
        .collect();
    assert!(
        to_nodes.len() >= 2,
        "{} routes to node networks",
        to_nodes.len()
    );
    let (a, b) = (&to_nodes[0], &to_nodes[1]);
    let (Some(b_net), Some(a_port)) = (b.dst_network_addr, a.next_hop_port) else {
        panic!("routes without a destination or a next hop: {a:?} {b:?}");
    };
    // The scenario's first pod on a node is at .10 of its network.
    let pod = Ipv4Addr::from(u32::from(b_net) + 10);
    let hijack = Route::normal(
        a.parent,
        Uuid::from_u128(0xfeed),
        Ipv4Cidr::new(pod, 32).unwrap(),
        a_port,
    );
    let key = "v2/hijack".to_string();
    let rec = vec![Resource::Route(hijack)];
    run.put(
        "a /32 route through another node's port",
        vec![(&key, &rec)],
    );
    assert!(
        run.verdicts.ok().iter().any(Result::is_err),
        "the /32 route took nothing down"
    );
    run.gone("the /32 route gone", vec![&key]);
    mirror_route_beside_an_unchanged_router(run, v2, a);
    let (port_key, port) = v2
        .iter()
        .find(|(_, r)| matches!(r.as_slice(), [Resource::Port(p)] if Some(p.id) == b.next_hop_port))
        .map(|(k, r)| (k.clone(), r.clone()))
        .unwrap();
    run.gone("a node network's router port", vec![&port_key]);
    assert!(
        run.verdicts.ok().iter().any(Result::is_err),
        "the port took nothing down"
    );
    run.put(
        "a node network's router port back",
        vec![(&port_key, &port)],
    );
    assert!(run.verdicts.ok().iter().all(Result::is_ok));
}

/// A route mirroring `a` (the same destination and next hop, one weight higher, so it never
/// wins; what a cutover's link adds), in a batch that also reports `a`'s router with the
/// record it had, as the simulator does for a router whose route list changed: only the
/// flows with a lookup into `a`'s network are judged again, the verdicts stay.
fn mirror_route_beside_an_unchanged_router(run: &mut Run, v2: &Records, a: &Route) {
    let (router_key, router) = v2
        .iter()
        .find(|(_, r)| matches!(r.as_slice(), [Resource::Router(x)] if x.id == a.parent))
        .map(|(k, r)| (k.clone(), r.clone()))
        .unwrap();
    let mut mirror = a.clone();
    mirror.id = Uuid::from_u128(0xbeef);
    mirror.weight = Some(mirror.weight.unwrap_or(100) + 1);
    let (key, rec) = ("v2/mirror".to_string(), vec![Resource::Route(mirror)]);
    let before = run.judged;
    run.put(
        "a mirror route, its router reported unchanged",
        vec![(&key, &rec), (&router_key, &router)],
    );
    let judged = run.judged - before;
    assert!(run.verdicts.ok().iter().all(Result::is_ok));
    // On three nodes most flows have an end, or a Service endpoint, in every node's
    // network; the router's whole record taken out and in would judge them all.
    assert!(
        judged < run.flows.len(),
        "a mirror route beside an unchanged router judged {judged} of {} flows",
        run.flows.len()
    );
    run.gone("the mirror route gone", vec![&key]);
}
