//! Chains and their ordered rules.

use midonet_translators::model::{Chain, Kind, PortRange, Rule};
use serde_json::{json, Value};
use uuid::Uuid;

use super::{
    body_of, check_name, ensure_id, item, list, parse, strip, uuid_str, ApiError, ChainRec,
    Outcome, Reply, RuleRec, Store,
};

impl Store {
    // --- Chains -------------------------------------------------------------------------

    pub fn list_chains(&self, tenant: Option<&str>) -> Outcome {
        let items = self
            .chains
            .values()
            .filter(|c| {
                tenant.is_none_or(|t| c.body.get("tenantId").and_then(Value::as_str) == Some(t))
            })
            .map(|c| Value::Object(c.body.clone()))
            .collect();
        list(Kind::Chain.collection_media_type(), items)
    }

    pub fn get_chain(&self, id: Uuid) -> Outcome {
        let c = self.chain(id)?;
        item(Kind::Chain, Value::Object(c.body.clone()))
    }

    fn chain(&self, id: Uuid) -> Result<&ChainRec, ApiError> {
        self.chains
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::Chain, id))
    }

    pub fn create_chain(&mut self, mut body: Value) -> Outcome {
        ensure_id(&mut body);
        let chain: Chain = parse(None, body)?;
        check_name(chain.name.as_ref(), 0)?;
        if self.chains.contains_key(&chain.id) {
            return Err(ApiError::conflict(format!(
                "a chain with id {} already exists",
                chain.id
            )));
        }
        self.chains.insert(
            chain.id,
            ChainRec {
                body: body_of(&chain),
                rules: Vec::new(),
            },
        );
        Ok(Reply::Created(format!("/chains/{}", chain.id)))
    }

    /// Deletes the chain, its rules and the rules of other chains jumping to it, and
    /// clears the filter references of bridges, routers and ports to it.
    pub fn delete_chain(&mut self, id: Uuid) -> Outcome {
        let rec = self
            .chains
            .remove(&id)
            .ok_or_else(|| ApiError::missing(Kind::Chain, id))?;
        for rule in rec.rules {
            self.rules.remove(&rule);
        }
        let jumping: Vec<Uuid> = self
            .rules
            .iter()
            .filter(|(_, r)| r.jump_chain == Some(id))
            .map(|(rule_id, _)| *rule_id)
            .collect();
        for rule in jumping {
            self.remove_rule(rule);
        }
        let id_value = uuid_str(id);
        let clear = |body: &mut super::Body| {
            let mut cleared = false;
            for key in ["inboundFilterId", "outboundFilterId"] {
                if body.get(key) == Some(&id_value) {
                    body.remove(key);
                    cleared = true;
                }
            }
            cleared
        };
        self.bridges.update_each(|_, b| clear(&mut b.body));
        self.routers.update_each(|_, r| clear(&mut r.body));
        self.ports.update_each(|_, p| clear(&mut p.body));
        Ok(Reply::NoContent)
    }

    // --- Rules --------------------------------------------------------------------------

    pub fn list_rules(&self, chain: Uuid) -> Outcome {
        let rec = self.chain(chain)?;
        let items = rec
            .rules
            .iter()
            .enumerate()
            .filter_map(|(index, id)| self.rules.get(id).map(|r| self.view_rule(r, index)))
            .collect();
        list(Kind::Rule.collection_media_type(), items)
    }

    pub fn get_rule(&self, id: Uuid) -> Outcome {
        let rec = self
            .rules
            .get(&id)
            .ok_or_else(|| ApiError::missing(Kind::Rule, id))?;
        let index = self
            .chains
            .get(&rec.chain)
            .and_then(|c| c.rules.iter().position(|r| *r == id))
            .unwrap_or(0);
        item(Kind::Rule, self.view_rule(rec, index))
    }

    /// A rule as MidoNet reports it: its body plus its chain and 1-based position.
    pub(crate) fn view_rule(&self, rec: &RuleRec, index: usize) -> Value {
        let mut body = rec.body.clone();
        body.insert("chainId".into(), uuid_str(rec.chain));
        body.insert("position".into(), json!(index + 1));
        Value::Object(body)
    }

    /// Inserts a rule at its `position` (1-based, default 1: the head of the chain).
    pub fn create_rule(&mut self, chain: Uuid, mut body: Value) -> Outcome {
        ensure_id(&mut body);
        strip(&mut body, &["chainId"]);
        let mut rule: Rule = parse(Some(chain), body)?;
        validate_rule(&rule)?;
        if self.rules.contains_key(&rule.id) {
            return Err(ApiError::conflict(format!(
                "a rule with id {} already exists",
                rule.id
            )));
        }
        let len = self.chain(chain)?.rules.len();
        // MidoNet treats an absent or zero position as 1.
        let position = rule.position.filter(|p| *p > 0).unwrap_or(1) as usize;
        if position > len + 1 {
            return Err(ApiError::bad_request(format!(
                "position {position} is past the end of the chain ({len} rules)"
            )));
        }
        if let Some(target) = rule.jump_chain_id {
            self.chain(target)?;
        }
        rule.position = None;
        let id = rule.id;
        self.rules.insert(
            id,
            RuleRec {
                body: body_of(&rule),
                chain,
                jump_chain: rule.jump_chain_id,
            },
        );
        if let Some(c) = self.chains.get_mut(&chain) {
            c.rules.insert(position - 1, id);
        }
        Ok(Reply::Created(format!("/rules/{id}")))
    }

    pub fn delete_rule(&mut self, id: Uuid) -> Outcome {
        if self.remove_rule(id) {
            Ok(Reply::NoContent)
        } else {
            Err(ApiError::missing(Kind::Rule, id))
        }
    }

    fn remove_rule(&mut self, id: Uuid) -> bool {
        let Some(rec) = self.rules.remove(&id) else {
            return false;
        };
        if let Some(c) = self.chains.get_mut(&rec.chain) {
            c.rules.retain(|r| *r != id);
        }
        true
    }
}

/// The per-type constraints MidoNet's rule models declare.
fn validate_rule(rule: &Rule) -> Result<(), ApiError> {
    if rule.rule_type == midonet_translators::model::RuleType::Jump && rule.jump_chain_id.is_none()
    {
        return Err(ApiError::invalid(
            "jumpChainId",
            "is required for a jump rule",
        ));
    }
    if rule.rule_type.is_nat() && rule.flow_action.is_none() {
        return Err(ApiError::invalid(
            "flowAction",
            "is required for a NAT rule",
        ));
    }
    if rule.rule_type.is_forward_nat() {
        let targets = rule.nat_targets.as_deref().unwrap_or_default();
        if targets.is_empty() {
            return Err(ApiError::invalid("natTargets", "needs at least one target"));
        }
        for (i, t) in targets.iter().enumerate() {
            if t.address_from.is_none() || t.address_to.is_none() {
                return Err(ApiError::invalid(
                    format!("natTargets[{i}]"),
                    "needs addressFrom and addressTo",
                ));
            }
        }
    }
    if let Some(dl_type) = rule.dl_type {
        if dl_type < 0x0600 {
            return Err(ApiError::invalid(
                "dlType",
                "must be at least 0x0600 (1536)",
            ));
        }
    }
    check_range("tpSrc", rule.tp_src.as_ref())?;
    check_range("tpDst", rule.tp_dst.as_ref())?;
    check_fragment_policy(rule)
}

/// MidoNet's `Condition.getAndValidateFragmentPolicy` (and `ForwardNatRule`'s): a rule
/// matching L4 ports cannot match fragments without a header (`any`, `nonheader`); a
/// forward NAT rule other than a floating IP (one target, one address, no ports) and
/// without L4 fields matches unfragmented packets only.
fn check_fragment_policy(rule: &Rule) -> Result<(), ApiError> {
    use midonet_translators::model::FragmentPolicy;
    let Some(fp) = rule.condition.fragment_policy else {
        return Ok(());
    };
    let l4 = rule.tp_src.is_some() || rule.tp_dst.is_some();
    let floating_ip = match rule.nat_targets.as_deref() {
        Some([t]) => {
            t.address_from == t.address_to
                && t.port_from.unwrap_or(0) == 0
                && t.port_to.unwrap_or(0) == 0
        }
        _ => false,
    };
    let bad = if rule.rule_type.is_forward_nat() {
        (!floating_ip || l4) && fp != FragmentPolicy::Unfragmented
    } else {
        l4 && matches!(fp, FragmentPolicy::Any | FragmentPolicy::Nonheader)
    };
    if bad {
        return Err(ApiError::invalid(
            "fragmentPolicy",
            "is not valid for a rule with L4 fields or a forward NAT rule",
        ));
    }
    Ok(())
}

/// Transport port ranges are 1..=65535 with start <= end.
fn check_range(field: &str, range: Option<&PortRange>) -> Result<(), ApiError> {
    let Some(range) = range else { return Ok(()) };
    let bad = |why: &str| Err(ApiError::invalid(field, why));
    if range.start == Some(0) || range.end == Some(0) {
        return bad("ports start at 1");
    }
    if let (Some(start), Some(end)) = (range.start, range.end) {
        if start > end {
            return bad("start is after end");
        }
    }
    Ok(())
}
