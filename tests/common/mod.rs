//! Helpers shared by the simulator and client integration tests.
#![allow(dead_code)]

use std::time::Duration;

use midonet_sim::admin::AdminClient;
use midonet_sim::{self as sim, SimAuth, SimConfig, SimHandle};
use serde_json::Value;
use uuid::Uuid;

pub const USER: &str = "admin";
pub const PASSWORD: &str = "pa55-Very-Secret-word";
pub const PROJECT: &str = "kubernetes";

/// A fresh random id.
pub fn new_id() -> Uuid {
    Uuid::new_v4()
}

/// The host every simulator in these tests knows.
pub fn host_id() -> Uuid {
    Uuid::parse_str("a0a0a0a0-0000-4000-8000-000000000001").unwrap()
}

pub fn other_host_id() -> Uuid {
    Uuid::parse_str("a0a0a0a0-0000-4000-8000-000000000002").unwrap()
}

pub fn sim_config() -> SimConfig {
    SimConfig {
        hosts: vec![
            ("node1".to_string(), host_id()),
            ("node2".to_string(), other_host_id()),
        ],
        ..SimConfig::default()
    }
}

pub fn auth() -> SimAuth {
    SimAuth {
        username: USER.into(),
        password: PASSWORD.into(),
        project: PROJECT.into(),
        token_ttl: Duration::from_secs(600),
    }
}

pub async fn start_sim() -> SimHandle {
    sim::start(sim_config()).await.unwrap()
}

pub async fn start_sim_with_auth() -> SimHandle {
    sim::start(SimConfig {
        auth: Some(auth()),
        ..sim_config()
    })
    .await
    .unwrap()
}

pub fn admin(sim: &SimHandle) -> AdminClient {
    AdminClient::new(sim.admin_url()).unwrap()
}

/// A bare HTTP client for the simulated API: sends exactly what a test says.
pub struct Raw {
    http: reqwest::Client,
    base: String,
    pub token: Option<String>,
}

/// An answer: status and JSON body (`Null` when empty or not JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
    pub content_type: String,
}

impl Raw {
    pub fn new(sim: &SimHandle) -> Raw {
        Raw {
            http: reqwest::Client::new(),
            base: sim.api_url().to_string(),
            token: None,
        }
    }

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        media: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(media) = media {
            req = req.header("Content-Type", media);
        }
        if let Some(token) = &self.token {
            req = req.header("X-Auth-Token", token);
        }
        if let Some(body) = body {
            req = req.body(body.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = resp.text().await.unwrap();
        Answer {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            content_type,
        }
    }

    pub async fn post(&self, path: &str, media: &str, body: Value) -> Answer {
        self.send("POST", path, Some(media), Some(&body)).await
    }

    pub async fn put(&self, path: &str, media: &str, body: Value) -> Answer {
        self.send("PUT", path, Some(media), Some(&body)).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, None, None).await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.send("DELETE", path, None, None).await
    }
}
