//! What the kube-apiserver served during a phase, by verb, resource and response code: its
//! own `apiserver_request_total` counters, read from `/metrics` before and after. The
//! apiserver-side counterpart of "backend requests per resource": it shows every request a
//! phase cost, whoever made it (controllers, kube-controller-manager, the bench's watch).

use std::collections::BTreeMap;

use axum::http::Request;
use kube::Client;

use super::Res;

/// Counters keyed `VERB resource[/subresource] code`.
pub type Counts = BTreeMap<String, f64>;

/// The apiserver's request counters now.
pub async fn read(client: &Client) -> Res<Counts> {
    let request = Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    Ok(parse(&text))
}

/// The counters that grew from `before` to `after`, by how much.
pub fn growth(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0.0);
            (d >= 1.0).then(|| (k.clone(), d))
        })
        .collect()
}

fn parse(metrics: &str) -> Counts {
    let mut out = Counts::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| -> &str {
            labels
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == name)
                .map_or("", |(_, v)| v.trim_matches('"'))
        };
        let mut resource = label("resource").to_string();
        if !label("subresource").is_empty() {
            resource = format!("{resource}/{}", label("subresource"));
        }
        let key = format!("{} {resource} {}", label("verb"), label("code"));
        *out.entry(key).or_default() += value;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_by_verb_resource_and_code() {
        let text = r#"# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="midonet.org",resource="translations",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="midonet.org",resource="translations",scope="resource",subresource="status",verb="PUT",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="translations",scope="resource",subresource="status",verb="PUT",version="v1beta1"} 1
apiserver_request_duration_seconds_count{verb="PUT"} 9
"#;
        let counts = parse(text);
        assert_eq!(counts.get("POST translations 201"), Some(&3.0));
        assert_eq!(counts.get("PUT translations/status 200"), Some(&6.0));
        assert_eq!(counts.len(), 2);
        let later: Counts = [("POST translations 201".to_string(), 10.0)].into();
        assert_eq!(
            growth(&counts, &later),
            [("POST translations 201".to_string(), 7.0)].into()
        );
    }
}
