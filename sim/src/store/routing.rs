//! Routes of routers.

use midonet_translators::model::{Kind, Route, RouteType};
use serde_json::Value;
use uuid::Uuid;

use super::{
    body_of, ensure_id, item, list, parse, strip, uuid_str, ApiError, Device, Outcome, Reply,
    RouteRec, Store,
};

/// What MidoNet answers when a `Normal` route's next hop is not a port of its router.
const NEXT_HOP_PORT_INVALID: &str =
    "a Normal route needs a nextHopPort that is a port of the same router";

impl Store {
    pub fn list_routes(&self, router: Uuid) -> Outcome {
        let rec = self.router(router)?;
        let items = rec
            .routes
            .iter()
            .filter_map(|id| self.routes.get(id))
            .map(|r| self.view_route(r))
            .collect();
        list(Kind::Route.collection_media_type(), items)
    }

    pub fn get_route(&self, id: Uuid) -> Outcome {
        let rec = self
            .routes
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::Route, id))?;
        item(Kind::Route, self.view_route(rec))
    }

    /// A route as MidoNet reports it: its body plus its router.
    pub(crate) fn view_route(&self, rec: &RouteRec) -> Value {
        let mut body = rec.body.clone();
        body.insert("routerId".into(), uuid_str(rec.router));
        body.entry("learned").or_insert(Value::Bool(false));
        Value::Object(body)
    }

    /// Creates a route. A `Normal` route must name a next-hop port of this router (400
    /// otherwise, even when the router does not exist); other types need the router (404)
    /// and, if they name one, an existing next-hop port (404).
    pub fn create_route(&mut self, router: Uuid, mut body: Value) -> Outcome {
        ensure_id(&mut body);
        strip(&mut body, &["routerId", "learned"]);
        let route: Route = parse(Some(router), body)?;
        let route_type = route
            .route_type
            .ok_or_else(|| ApiError::invalid("type", "is required"))?;
        if route.src_network_addr.is_none() {
            return Err(ApiError::invalid("srcNetworkAddr", "is required"));
        }
        if route.dst_network_addr.is_none() {
            return Err(ApiError::invalid("dstNetworkAddr", "is required"));
        }
        if route_type == RouteType::Normal {
            let on_this_router = route
                .next_hop_port
                .and_then(|p| self.ports.get(&p))
                .is_some_and(|p| p.device_kind == Device::Router && p.device == router);
            if !on_this_router {
                return Err(ApiError::bad_request(NEXT_HOP_PORT_INVALID));
            }
        } else {
            self.router(router)?;
            if let Some(port) = route.next_hop_port {
                if !self.ports.contains_key(&port) {
                    return Err(ApiError::missing(Kind::Port, port));
                }
            }
        }
        if self.routes.contains_key(&route.id) {
            return Err(ApiError::conflict(format!(
                "a route with id {} already exists",
                route.id
            )));
        }
        self.routes.insert(
            route.id,
            RouteRec {
                body: body_of(&route),
                router,
                next_hop_port: route.next_hop_port,
            },
        );
        if let Some(r) = self.routers.get_mut(&router) {
            r.routes.push(route.id);
        }
        Ok(Reply::Created(format!("/routes/{}", route.id)))
    }

    pub fn delete_route(&mut self, id: Uuid) -> Outcome {
        if self.remove_route(id) {
            Ok(Reply::NoContent)
        } else {
            Err(ApiError::missing(Kind::Route, id))
        }
    }

    pub(crate) fn remove_route(&mut self, id: Uuid) -> bool {
        let Some(rec) = self.routes.remove(&id) else {
            return false;
        };
        if let Some(r) = self.routers.get_mut(&rec.router) {
            r.routes.retain(|route| *route != id);
        }
        true
    }
}
