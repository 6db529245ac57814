//! The flow probe judges again only the flows whose traces read what a batch of changes
//! touched (`midonet_dataplane::reads`), and keeps the ARP exchanges the batch did not
//! touch. Both are held here to a full judgement on a topology rebuilt from scratch, after
//! every batch of a version bump done record by record: the new version built beside the
//! old one, each node's bindings moved (with a batch in between where they are on
//! neither), the old version retired, then an address group's member and a chain's rules
//! changed on their own, every port group membership out and back; with each binding a
//! record of its own, and in its port's record as the simulator renders it. Besides the
//! probe's flows, each node calls its own pods (admitted past the policies by the nodes'
//! port group). One pod's binding moved at a time judges again only that pod's flows.

use std::collections::{BTreeMap, BTreeSet};

use midonet_dataplane::check::POD_PORT;
use midonet_dataplane::{
    Attachment, Changes, FlowKind, LiveTopology, Protocol, RecordChange, RuleOrder, SocketV4,
    Topology,
};
use midonet_testkit::probe::{judge_all, select_flows, ProbeFlow, SampleSize, Verdicts};
use midonet_testkit::scenario::{Scale, Scenario};
use std::net::Ipv4Addr;

use midonet_translators::model::{HostInterfacePort, Ipv4Cidr, Resource, Route};
use midonet_translators::TranslatorConfig;
use uuid::Uuid;

type Records = BTreeMap<String, Vec<Resource>>;

/// A version's records bound (as it ends) and with its bindings held back (as it is
/// built), in one of two layouts: each binding a record of its own, or as the simulator
/// renders them (`midonet_sim`'s `store::records`): in its port's record, after the port,
/// whose body names it (`hostId`, `interfaceName`).
struct Version {
    bound: Records,
    unbound: Records,
}

#[derive(Clone, Copy, Debug)]
enum Layout {
    BindingsOnTheirOwn,
    BindingsInTheirPorts,
}

impl Version {
    fn of(records: Records, layout: Layout) -> Version {
        let is_binding =
            |r: &Vec<Resource>| matches!(r.as_slice(), [Resource::HostInterfacePort(_)]);
        let unbound_own: Records = records
            .iter()
            .filter(|(_, r)| !is_binding(r))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        match layout {
            Layout::BindingsOnTheirOwn => Version {
                bound: records,
                unbound: unbound_own,
            },
            Layout::BindingsInTheirPorts => {
                let bindings: BTreeMap<Uuid, HostInterfacePort> = records
                    .values()
                    .filter_map(|r| match r.as_slice() {
                        [Resource::HostInterfacePort(b)] => Some((b.port_id, b.clone())),
                        _ => None,
                    })
                    .collect();
                let mut bound = unbound_own.clone();
                for rec in bound.values_mut() {
                    let [Resource::Port(p)] = rec.as_mut_slice() else {
                        continue;
                    };
                    let Some(b) = bindings.get(&p.id) else {
                        continue;
                    };
                    p.extra.insert("hostId".into(), b.parent.to_string().into());
                    let name = b.interface_name.clone().unwrap_or_default();
                    p.extra.insert("interfaceName".into(), name.into());
                    rec.push(Resource::HostInterfacePort(b.clone()));
                }
                Version {
                    bound,
                    unbound: unbound_own,
                }
            }
        }
    }

    /// The keys of the records binding an interface on `host`.
    fn on_host(&self, host: Uuid) -> Vec<String> {
        self.bound
            .iter()
            .filter(|(_, r)| {
                r.iter()
                    .any(|x| matches!(x, Resource::HostInterfacePort(b) if b.parent == host))
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn hosts(&self) -> std::collections::BTreeSet<Uuid> {
        let bindings = self.bound.values().flatten();
        bindings
            .filter_map(|r| match r {
                Resource::HostInterfacePort(b) => Some(b.parent),
                _ => None,
            })
            .collect()
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

/// The old version's and the new version's records in `layout` (the scenario's small
/// cluster translated at two versions), and a run with the old version in and the new
/// one built beside it, its bindings held back.
fn built_beside(layout: Layout) -> (Run, Version, Version) {
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
    let v1 = Version::of(old.records("v1"), layout);
    let v2 = Version::of(new.records("v2"), layout);
    let size = SampleSize {
        services_per_source: 10,
        peers_per_source: 10,
    };
    let mut flows = select_flows(&old.cluster, size);
    assert!(flows.len() >= 12, "{} flows", flows.len());
    flows.extend(nodes_to_their_pods(&old.cluster.attachments()));
    let mut run = Run::new(flows, old.cluster.attachments());
    run.put("the old version", v1.bound.iter().collect());
    assert!(run.verdicts.ok().iter().all(Result::is_ok));
    let built: Vec<_> = v2.unbound.iter().collect();
    for part in built.chunks(built.len().div_ceil(3)) {
        run.put("a part of the new version", part.to_vec());
    }
    (run, v1, v2)
}

/// Each node's host to every pod on it, which Kubernetes lets through whatever the
/// policies say: what admits it past a policy's isolation is the node's host port's
/// membership in the nodes' port group.
fn nodes_to_their_pods(attachments: &[Attachment]) -> Vec<ProbeFlow> {
    let of = |prefix: &'static str| {
        attachments
            .iter()
            .filter(move |a| a.name.starts_with(prefix))
    };
    let mut flows = Vec::new();
    for node in of("node/") {
        for pod in of("pod/").filter(|p| p.host == node.host) {
            let Some(ip) = pod.primary_ip() else { continue };
            let to = SocketV4::new(ip, POD_PORT);
            flows.push(ProbeFlow {
                kind: FlowKind::NodeToPod,
                from: node.clone(),
                to,
                to_name: pod.name.clone(),
                protocol: Protocol::Tcp,
                receivers: BTreeSet::from([(pod.name.clone(), to)]),
                refused: BTreeSet::new(),
            });
        }
    }
    assert!(flows.len() >= 12, "{} flows from nodes", flows.len());
    flows
}

/// Moves the bindings of the records `old` (of `v1`) to the records `new` (of `v2`):
/// the old ports unbound (or their bindings gone), then the new ones bound.
fn move_bindings(
    run: &mut Run,
    (v1, old): (&Version, &[String]),
    (v2, new): (&Version, &[String]),
) {
    let unbound: Vec<_> = v1.unbound.iter().filter(|(k, _)| old.contains(k)).collect();
    let gone: Vec<_> = old
        .iter()
        .filter(|k| !v1.unbound.contains_key(*k))
        .collect();
    run.put("old ports unbound", unbound);
    run.gone("old bindings", gone);
    run.put(
        "new bindings",
        v2.bound.iter().filter(|(k, _)| new.contains(k)).collect(),
    );
}

/// A bump done record by record in `layout`, held to a full judgement after every batch
/// (`Run::apply`). Answers the run.
fn bump_judged_against_a_full_judgement(layout: Layout) -> Run {
    let (mut run, v1, v2) = built_beside(layout);
    // Each host's bindings: off the old ports, then onto the new ones.
    let before_moves = run.judged;
    for h in v2.hosts() {
        move_bindings(&mut run, (&v1, &v1.on_host(h)), (&v2, &v2.on_host(h)));
    }
    let moves = run.judged - before_moves;
    // The old version retired, in three parts.
    let retired: Vec<&String> = v1
        .bound
        .keys()
        .filter(|k| run.current.contains_key(*k))
        .collect();
    for part in retired.chunks(retired.len().div_ceil(3)) {
        run.gone("a part of the old version", part.to_vec());
    }
    assert!(run.verdicts.ok().iter().all(Result::is_ok));
    group_member_and_chain_changes(&mut run, &v2.bound);
    route_and_router_port_changes(&mut run, &v2.bound);
    eprintln!(
        "STATS {layout:?}: judged {} ({moves} in the bindings' moves) batches {} flows {} some_down {}",
        run.judged,
        run.batches,
        run.flows.len(),
        run.some_down
    );
    // Not vacuous: flows went down and came back.
    assert!(run.some_down > 0, "no batch took a flow down");
    run
}

/// An address group's member out and back; a chain's rules emptied and back.
fn group_member_and_chain_changes(run: &mut Run, v2: &Records) {
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
    port_group_members_out_and_back(run, v2);
    let chain = v2
        .iter()
        .filter(|(k, r)| k.contains("/chain/") && r.len() > 2)
        .map(|(k, r)| (k.clone(), r.clone()))
        .next_back()
        .unwrap();
    let emptied = vec![chain.1[0].clone()];
    run.put("a chain emptied", vec![(&chain.0, &emptied)]);
    run.put("a chain's rules back", vec![(&chain.0, &chain.1)]);
}

/// Every port group membership out and back, one at a time (a walk reads a port's groups
/// through the port only): some of them change verdicts, as the full judgement says.
fn port_group_members_out_and_back(run: &mut Run, v2: &Records) {
    let members: Vec<(String, Vec<Resource>)> = v2
        .iter()
        .filter(|(_, r)| matches!(r.as_slice(), [Resource::PortGroupPort(_)]))
        .map(|(k, r)| (k.clone(), r.clone()))
        .collect();
    assert!(!members.is_empty(), "no port group member");
    let mut changed_a_verdict = 0;
    for (key, rec) in &members {
        let before = run.verdicts.ok();
        run.gone("a port group's member", vec![key]);
        changed_a_verdict += usize::from(run.verdicts.ok() != before);
        run.put("a port group's member back", vec![(key, rec)]);
        assert_eq!(run.verdicts.ok(), before, "{key} back");
    }
    assert!(changed_a_verdict > 0, "no membership changed a verdict");
}

#[test]
fn judging_again_only_what_a_change_touched_gives_a_full_judgement() {
    for layout in [Layout::BindingsOnTheirOwn, Layout::BindingsInTheirPorts] {
        let run = bump_judged_against_a_full_judgement(layout);
        // The bump's batches judged fewer than half the flows (a router's routes are
        // read by every flow).
        let every = run.batches * run.flows.len();
        assert!(
            run.judged * 2 < every,
            "{layout:?}: {} of {every} flow judgements made",
            run.judged
        );
    }
}

/// As the simulator renders a binding, in its port's record with the port's body naming
/// it, one pod's binding moved pod after pod: each move judges again only the flows of
/// that pod (from it, or to it as the pod or a Service endpoint, admitted or refused by
/// the policies), not every flow through
/// the bridges it leaves and joins; the verdicts stay those of a full judgement.
#[test]
fn moving_one_binding_judges_again_only_the_flows_of_its_pod() {
    let (mut run, v1, v2) = built_beside(Layout::BindingsInTheirPorts);
    let interface_of = |v: &Version, key: &String| {
        v.bound[key].iter().find_map(|r| match r {
            Resource::HostInterfacePort(b) => Some((b.parent, b.interface_name.clone())),
            _ => None,
        })
    };
    let (mut moves, mut narrower) = (0, 0);
    for h in v2.hosts() {
        for new in v2.on_host(h) {
            let interface = interface_of(&v2, &new);
            let old: Vec<String> = v1
                .on_host(h)
                .into_iter()
                .filter(|k| interface_of(&v1, k) == interface)
                .collect();
            assert_eq!(old.len(), 1, "{interface:?} bound once in the old version");
            let pod = run
                .attachments
                .iter()
                .find(|a| interface == Some((a.host, Some(a.interface.clone()))))
                .unwrap();
            let of_the_pod = run
                .flows
                .iter()
                .filter(|f| {
                    f.from.name == pod.name
                        || f.receivers.iter().any(|(w, _)| *w == pod.name)
                        || pod.ips.iter().any(|ip| f.refused.contains(ip))
                })
                .count();
            let pod = pod.name.clone();
            let before = run.judged;
            move_bindings(&mut run, (&v1, &old), (&v2, &[new]));
            let judged = run.judged - before;
            // Three batches, each judging at most the pod's flows.
            assert!(
                judged <= 3 * of_the_pod,
                "moving {pod} judged {judged} flows; {of_the_pod} are its"
            );
            moves += 1;
            narrower += usize::from(judged < 3 * run.flows.len());
        }
    }
    assert!(run.verdicts.ok().iter().all(Result::is_ok));
    assert!(moves >= 12 && narrower == moves, "{narrower} of {moves}");
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
