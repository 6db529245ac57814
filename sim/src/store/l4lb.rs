//! L4 load balancers with their pools, pool members and VIPs, and a router's binding to
//! its load balancer.
//!
//! As in MidoNet (`rest_api/models/{LoadBalancer,Pool,PoolMember,Vip}.java`,
//! `services/rest_api/resources/{LoadBalancer,Pool,PoolMember,Vip}Resource.scala`, storage
//! bindings of `MidonetBackend.scala`):
//!
//! - A load balancer POST may not name a router (400); a router is bound by a POST or PUT
//!   of the router naming the load balancer (404 if it does not exist, 409 if another router
//!   has it), unbound by a router PUT without it. A load balancer PUT that changes its
//!   `routerId` is a 400. Deleting the load balancer clears the router's `loadBalancerId`;
//!   deleting a router that still names one is a 409.
//! - A pool is created under its load balancer (404 if missing) with `protocol: TCP` and
//!   `status: ACTIVE`; `lbMethod` is required (400). A pool naming a health monitor is a
//!   404: the simulator has none. A member or VIP is created under its pool (404 if
//!   missing); a member gets `adminStateUp: true`, `status: ACTIVE`, `weight` 1 unless
//!   given (a weight below 1 is a 400). The top-level collections (`/pools`,
//!   `/pool_members`, `/vips`) list everything and create from the parent the body names
//!   (`loadBalancerId`, `poolId`: a VIP naming a missing pool is a 400, as in MidoNet).
//! - Deleting a load balancer deletes its pools, deleting a pool its members and VIPs
//!   (CASCADE). Deleting a missing pool, member or VIP is a 204, a missing load balancer a
//!   404.
//! - A pool PUT keeps its status, a member PUT its address, port and status, a VIP PUT
//!   replaces the rest.
//!
//! Not served, refused loudly: a pool created without a load balancer (MidoNet keeps such
//! an orphan; here a pool lives in its load balancer's record: 400), and a PUT moving a
//! pool to another load balancer or a VIP to another pool (400).
//!
//! A load balancer is one record with everything below it; GETs overlay the ids MidoNet
//! derives (`routerId`, `loadBalancerId`, `poolId`).

use midonet_translators::model::{Kind, LbStatus, LoadBalancer, Pool, PoolMember, Vip};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{
    body_of, ensure_id, force_id, item, list, parse, strip, uuid_str, ApiError, Body, Outcome,
    Reply, Store,
};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct LoadBalancerRec {
    pub body: Body,
    /// The router that names this load balancer.
    pub router: Option<Uuid>,
    pub pools: Vec<PoolRec>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PoolRec {
    pub id: Uuid,
    pub body: Body,
    pub members: Vec<ChildRec>,
    pub vips: Vec<ChildRec>,
}

/// A pool member or a VIP.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct ChildRec {
    pub id: Uuid,
    pub body: Body,
}

/// Members the server derives: never taken from a request body.
const DERIVED: &[&str] = &["routerId", "loadBalancerId", "poolId", "uri"];

/// Which list of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Child {
    Member,
    Vip,
}

impl Child {
    fn kind(self) -> Kind {
        match self {
            Child::Member => Kind::PoolMember,
            Child::Vip => Kind::Vip,
        }
    }

    fn of(self, pool: &PoolRec) -> &Vec<ChildRec> {
        match self {
            Child::Member => &pool.members,
            Child::Vip => &pool.vips,
        }
    }

    fn of_mut(self, pool: &mut PoolRec) -> &mut Vec<ChildRec> {
        match self {
            Child::Member => &mut pool.members,
            Child::Vip => &mut pool.vips,
        }
    }

    pub(crate) fn path(self, id: Uuid) -> String {
        match self {
            Child::Member => format!("/pool_members/{id}"),
            Child::Vip => format!("/vips/{id}"),
        }
    }
}

/// A load balancer as MidoNet reports it.
pub(crate) fn view_load_balancer(rec: &LoadBalancerRec) -> Value {
    let mut body = rec.body.clone();
    if let Some(router) = rec.router {
        body.insert("routerId".into(), uuid_str(router));
    }
    Value::Object(body)
}

pub(crate) fn view_pool(lb: Uuid, pool: &PoolRec) -> Value {
    let mut body = pool.body.clone();
    body.insert("loadBalancerId".into(), uuid_str(lb));
    Value::Object(body)
}

pub(crate) fn view_child(child: Child, lb: Uuid, pool: Uuid, rec: &ChildRec) -> Value {
    let mut body = rec.body.clone();
    body.insert("poolId".into(), uuid_str(pool));
    if child == Child::Vip {
        body.insert("loadBalancerId".into(), uuid_str(lb));
    }
    Value::Object(body)
}

/// Where a pool, member or VIP is: (load balancer, pool index, child index).
type At = (Uuid, usize, Option<usize>);

impl Store {
    fn load_balancer(&self, id: Uuid) -> Result<&LoadBalancerRec, ApiError> {
        self.load_balancers
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::LoadBalancer, id))
    }

    /// The load balancer and index of pool `id`.
    fn find_pool(&self, id: Uuid) -> Option<At> {
        self.load_balancers.iter().find_map(|(lb, rec)| {
            let i = rec.pools.iter().position(|p| p.id == id)?;
            Some((*lb, i, None))
        })
    }

    fn find_child(&self, child: Child, id: Uuid) -> Option<At> {
        self.load_balancers.iter().find_map(|(lb, rec)| {
            rec.pools.iter().enumerate().find_map(|(i, p)| {
                let j = child.of(p).iter().position(|c| c.id == id)?;
                Some((*lb, i, Some(j)))
            })
        })
    }

    fn pool_at(&self, (lb, i, _): At) -> &PoolRec {
        &self.load_balancers[&lb].pools[i]
    }

    fn any_id_taken(&self, id: Uuid) -> bool {
        self.find_pool(id).is_some()
            || self.find_child(Child::Member, id).is_some()
            || self.find_child(Child::Vip, id).is_some()
    }

    // --- Load balancers -----------------------------------------------------------------

    pub fn list_load_balancers(&self) -> Outcome {
        let items = self
            .load_balancers
            .values()
            .map(view_load_balancer)
            .collect();
        list(Kind::LoadBalancer.collection_media_type(), items)
    }

    pub fn get_load_balancer(&self, id: Uuid) -> Outcome {
        item(
            Kind::LoadBalancer,
            view_load_balancer(self.load_balancer(id)?),
        )
    }

    pub fn create_load_balancer(&mut self, mut body: Value) -> Outcome {
        ensure_id(&mut body);
        strip(&mut body, &["uri", "poolIds"]);
        let lb: LoadBalancer = parse(None, body)?;
        if lb.router_id.is_some() {
            return Err(ApiError::bad_request(
                "a load balancer is bound to a router by the router's loadBalancerId",
            ));
        }
        if self.load_balancers.contains_key(&lb.id) {
            return Err(ApiError::conflict(format!(
                "a load balancer with id {} already exists",
                lb.id
            )));
        }
        let body = with_default(body_of(&lb), "adminStateUp", Value::Bool(true));
        self.load_balancers.insert(
            lb.id,
            LoadBalancerRec {
                body,
                router: None,
                pools: Vec::new(),
            },
        );
        Ok(Reply::Created(format!("/load_balancers/{}", lb.id)))
    }

    /// Replaces `adminStateUp`; the router may not change.
    pub fn update_load_balancer(&mut self, id: Uuid, mut body: Value) -> Outcome {
        let router = self.load_balancer(id)?.router;
        force_id(&mut body, id);
        strip(&mut body, &["uri", "poolIds"]);
        let lb: LoadBalancer = parse(None, body)?;
        if lb.router_id != router {
            return Err(ApiError::bad_request("Router cannot be modified"));
        }
        let mut body = with_default(body_of(&lb), "adminStateUp", Value::Bool(true));
        body.remove("routerId");
        if let Some(rec) = self.load_balancers.get_mut(&id) {
            rec.body = body;
        }
        Ok(Reply::NoContent)
    }

    /// Deletes it with its pools, their members and VIPs; its router forgets it.
    pub fn delete_load_balancer(&mut self, id: Uuid) -> Outcome {
        let rec = self
            .load_balancers
            .remove(&id)
            .ok_or_else(|| ApiError::missing(Kind::LoadBalancer, id))?;
        if let Some(r) = rec.router.and_then(|r| self.routers.get_mut(&r)) {
            r.body.remove("loadBalancerId");
        }
        Ok(Reply::NoContent)
    }

    /// Binds router `router` to `to` (unbinding it from `from`): the load balancer must
    /// exist (404) and not be another router's (409).
    pub(crate) fn check_router_binding(&self, router: Uuid, to: Option<Uuid>) -> Outcome {
        if let Some(lb) = to {
            match self.load_balancer(lb)?.router {
                Some(other) if other != router => Err(ApiError::conflict(format!(
                    "load balancer {lb} is already used by router {other}"
                ))),
                _ => Ok(Reply::NoContent),
            }
        } else {
            Ok(Reply::NoContent)
        }
    }

    /// Records a router's new binding (after [`Store::check_router_binding`]).
    pub(crate) fn bind_router(&mut self, router: Uuid, from: Option<Uuid>, to: Option<Uuid>) {
        if from == to {
            return;
        }
        if let Some(rec) = from.and_then(|lb| self.load_balancers.get_mut(&lb)) {
            rec.router = None;
        }
        if let Some(rec) = to.and_then(|lb| self.load_balancers.get_mut(&lb)) {
            rec.router = Some(router);
        }
    }

    // --- Pools --------------------------------------------------------------------------

    /// Every pool, or those of load balancer `lb`.
    pub fn list_pools(&self, lb: Option<Uuid>) -> Outcome {
        if let Some(lb) = lb {
            self.load_balancer(lb)?;
        }
        let items = self
            .load_balancers
            .iter()
            .filter(|(id, _)| lb.is_none_or(|lb| lb == **id))
            .flat_map(|(id, rec)| rec.pools.iter().map(|p| view_pool(*id, p)))
            .collect();
        list(Kind::Pool.collection_media_type(), items)
    }

    pub fn get_pool(&self, id: Uuid) -> Outcome {
        let at = self
            .find_pool(id)
            .ok_or_else(|| ApiError::missing(Kind::Pool, id))?;
        item(Kind::Pool, view_pool(at.0, self.pool_at(at)))
    }

    /// Creates a pool of `lb`, or (top-level POST) of the load balancer the body names.
    pub fn create_pool(&mut self, lb: Option<Uuid>, mut body: Value) -> Outcome {
        let lb =
            match lb.or_else(|| named(&body, "loadBalancerId")) {
                Some(lb) => lb,
                None => return Err(ApiError::bad_request(
                    "the simulator keeps a pool in its load balancer: loadBalancerId is required",
                )),
            };
        ensure_id(&mut body);
        strip(
            &mut body,
            &["uri", "poolMemberIds", "vipIds", "mappingStatus"],
        );
        let mut pool: Pool = parse(Some(lb), body)?;
        pool.protocol = Some(midonet_translators::model::PoolProtocol::Tcp);
        pool.status = Some(LbStatus::Active);
        pool.load_balancer_id = None;
        self.check_health_monitor(&pool)?;
        self.load_balancer(lb)?;
        if self.any_id_taken(pool.id) {
            return Err(ApiError::conflict(format!(
                "a pool with id {} already exists",
                pool.id
            )));
        }
        let body = with_default(body_of(&pool), "adminStateUp", Value::Bool(true));
        if let Some(rec) = self.load_balancers.get_mut(&lb) {
            rec.pools.push(PoolRec {
                id: pool.id,
                body,
                members: Vec::new(),
                vips: Vec::new(),
            });
        }
        Ok(Reply::Created(format!("/pools/{}", pool.id)))
    }

    fn check_health_monitor(&self, pool: &Pool) -> Result<(), ApiError> {
        match pool.health_monitor_id {
            Some(hm) => Err(ApiError::not_found(format!(
                "there is no HealthMonitor with id {hm} (the simulator has no health monitors)"
            ))),
            None => Ok(()),
        }
    }

    /// Replaces the body; the status stays, the load balancer may not change.
    pub fn update_pool(&mut self, id: Uuid, mut body: Value) -> Outcome {
        let at = self
            .find_pool(id)
            .ok_or_else(|| ApiError::missing(Kind::Pool, id))?;
        if named(&body, "loadBalancerId").is_some_and(|lb| lb != at.0) {
            return Err(ApiError::bad_request(
                "the simulator does not move a pool to another load balancer",
            ));
        }
        force_id(&mut body, id);
        strip(
            &mut body,
            &["uri", "poolMemberIds", "vipIds", "mappingStatus"],
        );
        let mut pool: Pool = parse(Some(at.0), body)?;
        self.check_health_monitor(&pool)?;
        pool.load_balancer_id = None;
        pool.status = self
            .pool_at(at)
            .body
            .get("status")
            .and_then(Value::as_str)
            .and_then(LbStatus::from_wire);
        let body = with_default(body_of(&pool), "adminStateUp", Value::Bool(true));
        if let Some(rec) = self.load_balancers.get_mut(&at.0) {
            rec.pools[at.1].body = body;
        }
        Ok(Reply::NoContent)
    }

    /// Deletes it with its members and VIPs; a missing pool is a 204.
    pub fn delete_pool(&mut self, id: Uuid) -> Outcome {
        if let Some((lb, i, _)) = self.find_pool(id) {
            if let Some(rec) = self.load_balancers.get_mut(&lb) {
                rec.pools.remove(i);
            }
        }
        Ok(Reply::NoContent)
    }

    // --- Pool members and VIPs ------------------------------------------------------------

    /// Every member (VIP), or those of `pool`.
    pub fn list_children(&self, child: Child, pool: Option<Uuid>) -> Outcome {
        if let Some(pool) = pool {
            self.find_pool(pool)
                .ok_or_else(|| ApiError::missing(Kind::Pool, pool))?;
        }
        let items = self
            .load_balancers
            .iter()
            .flat_map(|(lb, rec)| rec.pools.iter().map(move |p| (*lb, p)))
            .filter(|(_, p)| pool.is_none_or(|id| id == p.id))
            .flat_map(|(lb, p)| {
                child
                    .of(p)
                    .iter()
                    .map(move |c| view_child(child, lb, p.id, c))
            })
            .collect();
        list(child.kind().collection_media_type(), items)
    }

    /// The VIPs of every pool of load balancer `lb`.
    pub fn list_load_balancer_vips(&self, lb: Uuid) -> Outcome {
        let rec = self.load_balancer(lb)?;
        let items = rec
            .pools
            .iter()
            .flat_map(|p| p.vips.iter().map(|c| view_child(Child::Vip, lb, p.id, c)))
            .collect();
        list(Kind::Vip.collection_media_type(), items)
    }

    pub fn get_child(&self, child: Child, id: Uuid) -> Outcome {
        let at = self
            .find_child(child, id)
            .ok_or_else(|| ApiError::missing(child.kind(), id))?;
        let pool = self.pool_at(at);
        let rec = &child.of(pool)[at.2.unwrap_or_default()];
        item(child.kind(), view_child(child, at.0, pool.id, rec))
    }

    /// Creates a member or VIP of `pool`, or (top-level POST) of the pool the body names.
    pub fn create_child(&mut self, child: Child, pool: Option<Uuid>, mut body: Value) -> Outcome {
        let top_level = pool.is_none();
        let pool = pool
            .or_else(|| named(&body, "poolId"))
            .ok_or_else(|| ApiError::invalid("poolId", "may not be null"))?;
        let at = match self.find_pool(pool) {
            Some(at) => at,
            // MidoNet: a VIP naming a missing pool is a bad request, a path naming one is
            // not found.
            None if top_level && child == Child::Vip => {
                return Err(ApiError::bad_request(format!(
                    "there is no Pool with id {pool}"
                )))
            }
            None => return Err(ApiError::missing(Kind::Pool, pool)),
        };
        ensure_id(&mut body);
        strip(&mut body, DERIVED);
        let (id, body) = match child {
            Child::Member => {
                let mut m: PoolMember = parse(Some(pool), body)?;
                m.admin_state_up = Some(true);
                m.status = Some(LbStatus::Active);
                m.weight = Some(check_weight(m.weight)?);
                (m.id, body_of(&m))
            }
            Child::Vip => {
                let v: Vip = parse(Some(pool), body)?;
                (
                    v.id,
                    with_default(body_of(&v), "adminStateUp", Value::Bool(true)),
                )
            }
        };
        if self.any_id_taken(id) {
            return Err(ApiError::conflict(format!(
                "a {} with id {id} already exists",
                child.kind()
            )));
        }
        if let Some(rec) = self.load_balancers.get_mut(&at.0) {
            child
                .of_mut(&mut rec.pools[at.1])
                .push(ChildRec { id, body });
        }
        Ok(Reply::Created(child.path(id)))
    }

    /// A member keeps its address, port and status; a VIP takes the new body (in the same
    /// pool).
    pub fn update_child(&mut self, child: Child, id: Uuid, mut body: Value) -> Outcome {
        let at = self
            .find_child(child, id)
            .ok_or_else(|| ApiError::missing(child.kind(), id))?;
        let pool = self.pool_at(at);
        if named(&body, "poolId").is_some_and(|p| p != pool.id) {
            return Err(ApiError::bad_request(format!(
                "the simulator does not move a {} to another pool",
                child.kind()
            )));
        }
        let pool_id = pool.id;
        let old = child.of(pool)[at.2.unwrap_or_default()].body.clone();
        force_id(&mut body, id);
        strip(&mut body, DERIVED);
        let body = match child {
            Child::Member => {
                let mut m: PoolMember = parse(Some(pool_id), body)?;
                let was: PoolMember = parse(Some(pool_id), Value::Object(old))?;
                m.address = was.address;
                m.protocol_port = was.protocol_port;
                m.status = was.status;
                m.weight = Some(check_weight(m.weight)?);
                body_of(&m)
            }
            Child::Vip => {
                let v: Vip = parse(Some(pool_id), body)?;
                with_default(body_of(&v), "adminStateUp", Value::Bool(true))
            }
        };
        if let Some(rec) = self.load_balancers.get_mut(&at.0) {
            child.of_mut(&mut rec.pools[at.1])[at.2.unwrap_or_default()].body = body;
        }
        Ok(Reply::NoContent)
    }

    /// Deleting a missing member or VIP is a 204.
    pub fn delete_child(&mut self, child: Child, id: Uuid) -> Outcome {
        if let Some((lb, i, Some(j))) = self.find_child(child, id) {
            if let Some(rec) = self.load_balancers.get_mut(&lb) {
                child.of_mut(&mut rec.pools[i]).remove(j);
            }
        }
        Ok(Reply::NoContent)
    }
}

/// A UUID member of a request body.
fn named(body: &Value, key: &str) -> Option<Uuid> {
    body.get(key)
        .and_then(Value::as_str)
        .and_then(|s| Uuid::parse_str(s).ok())
}

/// MidoNet's Java default for a member the body leaves out.
fn with_default(mut body: Body, key: &str, value: Value) -> Body {
    if body.get(key).is_none_or(Value::is_null) {
        body.insert(key.into(), value);
    }
    body
}

/// `weight` defaults to 1 and must be at least 1.
fn check_weight(weight: Option<u32>) -> Result<u32, ApiError> {
    match weight.unwrap_or(1) {
        0 => Err(ApiError::invalid(
            "weight",
            "must be greater than or equal to 1",
        )),
        w => Ok(w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::status;
    use serde_json::json;

    const LB: &str = "11111111-1111-4111-8111-111111111111";
    const LB2: &str = "11111111-1111-4111-8111-111111111112";
    const R: &str = "22222222-2222-4222-8222-222222222222";
    const R2: &str = "22222222-2222-4222-8222-222222222223";
    const P: &str = "33333333-3333-4333-8333-333333333333";
    const M: &str = "44444444-4444-4444-8444-444444444444";
    const V: &str = "55555555-5555-4555-8555-555555555555";

    fn uuid(s: &str) -> Uuid {
        Uuid::parse_str(s).unwrap()
    }

    fn got(o: Outcome) -> Value {
        match o {
            Ok(Reply::Json(_, v)) => v,
            other => panic!("not a JSON answer: {other:?}"),
        }
    }

    fn member() -> Value {
        json!({"id": M, "address": "10.1.0.5", "protocolPort": 8080,
               "adminStateUp": false, "status": "INACTIVE"})
    }

    fn vip() -> Value {
        json!({"id": V, "address": "192.0.2.7", "protocolPort": 80,
               "sessionPersistence": "SOURCE_IP"})
    }

    /// A load balancer with one pool, one member and one VIP, bound to router R.
    fn populated() -> Store {
        let mut s = Store::default();
        assert_eq!(status(s.create_load_balancer(json!({"id": LB}))), 201);
        assert_eq!(
            status(s.create_pool(Some(uuid(LB)), json!({"id": P, "lbMethod": "ROUND_ROBIN"}))),
            201
        );
        assert_eq!(
            status(s.create_child(Child::Member, Some(uuid(P)), member())),
            201
        );
        assert_eq!(
            status(s.create_child(Child::Vip, Some(uuid(P)), vip())),
            201
        );
        assert_eq!(
            status(s.create_router(json!({"id": R, "loadBalancerId": LB}))),
            201
        );
        s
    }

    #[test]
    fn creates_validate_and_default_as_midonet() {
        let mut s = Store::default();
        // A load balancer POST may not name its router.
        assert_eq!(
            status(s.create_load_balancer(json!({"id": LB, "routerId": R}))),
            400
        );
        // Parents must exist.
        let pool = json!({"id": P, "lbMethod": "ROUND_ROBIN"});
        assert_eq!(status(s.create_pool(Some(uuid(LB)), pool.clone())), 404);
        assert_eq!(
            status(s.create_child(Child::Member, Some(uuid(P)), member())),
            404
        );
        assert_eq!(
            status(s.create_child(
                Child::Vip,
                None,
                json!({"poolId": P, "address": "192.0.2.7", "protocolPort": 80})
            )),
            400
        );
        assert_eq!(status(s.create_load_balancer(json!({"id": LB}))), 201);
        assert_eq!(status(s.create_load_balancer(json!({"id": LB}))), 409);
        assert_eq!(
            status(s.create_pool(Some(uuid(LB)), json!({"id": P}))),
            400,
            "lbMethod is required"
        );
        assert_eq!(
            status(s.create_pool(
                Some(uuid(LB)),
                json!({"id": P, "lbMethod": "ROUND_ROBIN", "healthMonitorId": M})
            )),
            404
        );
        assert_eq!(status(s.create_pool(Some(uuid(LB)), pool)), 201);
        let got_pool = got(s.get_pool(uuid(P)));
        assert_eq!(got_pool["protocol"], "TCP");
        assert_eq!(got_pool["status"], "ACTIVE");
        assert_eq!(got_pool["loadBalancerId"], LB);
        assert_eq!(got_pool["adminStateUp"], true);
        // A member is created up and active whatever the body says, weight 1.
        assert_eq!(
            status(s.create_child(Child::Member, Some(uuid(P)), member())),
            201
        );
        let m = got(s.get_child(Child::Member, uuid(M)));
        assert_eq!(
            (&m["adminStateUp"], &m["status"], &m["weight"], &m["poolId"]),
            (&json!(true), &json!("ACTIVE"), &json!(1), &json!(P))
        );
        let zero = json!({"address": "10.1.0.6", "protocolPort": 80, "weight": 0});
        assert_eq!(
            status(s.create_child(Child::Member, Some(uuid(P)), zero)),
            400
        );
        assert_eq!(
            status(s.create_child(Child::Vip, Some(uuid(P)), vip())),
            201
        );
        let v = got(s.get_child(Child::Vip, uuid(V)));
        assert_eq!(
            (&v["loadBalancerId"], &v["poolId"]),
            (&json!(LB), &json!(P))
        );
        // Collections: everything, and per parent.
        assert_eq!(
            got(s.list_children(Child::Member, None))
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            got(s.list_children(Child::Vip, Some(uuid(P))))
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            got(s.list_pools(Some(uuid(LB)))).as_array().unwrap().len(),
            1
        );
        assert_eq!(status(s.list_pools(Some(uuid(LB2)))), 404);
    }

    #[test]
    fn a_router_binds_by_naming_the_load_balancer() {
        let mut s = populated();
        assert_eq!(got(s.get_load_balancer(uuid(LB)))["routerId"], R);
        // Another router may not take it; a missing load balancer is a 404.
        assert_eq!(
            status(s.create_router(json!({"id": R2, "loadBalancerId": LB}))),
            409
        );
        assert_eq!(
            status(s.create_router(json!({"id": R2, "loadBalancerId": LB2}))),
            404
        );
        // The router cannot be changed through the load balancer.
        assert_eq!(status(s.update_load_balancer(uuid(LB), json!({}))), 400);
        assert_eq!(
            status(s.update_load_balancer(uuid(LB), json!({"routerId": R, "adminStateUp": false}))),
            204
        );
        // A router still using it may not go.
        assert_eq!(status(s.delete_router(uuid(R))), 409);
        // A PUT without it unbinds.
        assert_eq!(status(s.update_router(uuid(R), json!({}))), 204);
        assert_eq!(got(s.get_load_balancer(uuid(LB))).get("routerId"), None);
        assert_eq!(
            status(s.update_router(uuid(R), json!({"loadBalancerId": LB}))),
            204
        );
        // Deleting the load balancer clears the router's reference and takes everything
        // below it.
        assert_eq!(status(s.delete_load_balancer(uuid(LB))), 204);
        assert_eq!(got(s.get_router(uuid(R))).get("loadBalancerId"), None);
        assert_eq!(status(s.get_pool(uuid(P))), 404);
        assert_eq!(status(s.get_child(Child::Member, uuid(M))), 404);
        assert_eq!(status(s.get_child(Child::Vip, uuid(V))), 404);
        assert_eq!(status(s.delete_load_balancer(uuid(LB))), 404);
        assert_eq!(status(s.delete_router(uuid(R))), 204);
    }

    #[test]
    fn updates_and_deletes_follow_midonet() {
        let mut s = populated();
        // A member PUT keeps address, port and status.
        let moved = json!({"address": "10.9.9.9", "protocolPort": 1, "weight": 3,
                           "adminStateUp": false, "status": "INACTIVE"});
        assert_eq!(status(s.update_child(Child::Member, uuid(M), moved)), 204);
        let m = got(s.get_child(Child::Member, uuid(M)));
        assert_eq!(
            (
                &m["address"],
                &m["protocolPort"],
                &m["status"],
                &m["weight"],
                &m["adminStateUp"]
            ),
            (
                &json!("10.1.0.5"),
                &json!(8080),
                &json!("ACTIVE"),
                &json!(3),
                &json!(false)
            )
        );
        // A VIP PUT replaces the rest.
        let again = json!({"address": "192.0.2.8", "protocolPort": 81});
        assert_eq!(status(s.update_child(Child::Vip, uuid(V), again)), 204);
        let v = got(s.get_child(Child::Vip, uuid(V)));
        assert_eq!(
            (&v["address"], &v["sessionPersistence"]),
            (&json!("192.0.2.8"), &Value::Null)
        );
        // A pool PUT keeps its status.
        let pool = json!({"lbMethod": "ROUND_ROBIN", "status": "INACTIVE", "adminStateUp": false});
        assert_eq!(status(s.update_pool(uuid(P), pool)), 204);
        assert_eq!(got(s.get_pool(uuid(P)))["status"], "ACTIVE");
        // Deleting a pool takes its members and VIPs; missing ones delete as 204.
        assert_eq!(status(s.delete_pool(uuid(P))), 204);
        assert_eq!(status(s.get_child(Child::Member, uuid(M))), 404);
        assert_eq!(status(s.get_child(Child::Vip, uuid(V))), 404);
        assert_eq!(status(s.delete_pool(uuid(P))), 204);
        assert_eq!(status(s.delete_child(Child::Member, uuid(M))), 204);
        assert_eq!(status(s.delete_child(Child::Vip, uuid(V))), 204);
    }

    #[test]
    fn the_dump_lists_everything_below_the_load_balancer() {
        let s = populated();
        let kinds: Vec<(String, String)> = s
            .dump()
            .resources
            .into_iter()
            .filter(|e| e.kind != "Router")
            .map(|e| (e.kind, e.parent))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("LoadBalancer".to_string(), String::new()),
                ("Pool".to_string(), LB.to_string()),
                ("PoolMember".to_string(), P.to_string()),
                ("Vip".to_string(), P.to_string()),
            ]
        );
        // Every entry parses with the one model.
        for e in s.dump().resources {
            let entry = midonet_translators::TranslationResource::new(
                e.kind.clone(),
                e.parent.clone(),
                e.body.to_string(),
            );
            midonet_translators::model::Resource::from_entry(&entry)
                .unwrap_or_else(|err| panic!("{}: {err}", e.kind));
        }
    }
}
