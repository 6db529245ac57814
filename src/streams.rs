//! Small streams the controllers' triggers are made of.

use std::time::Duration;

use futures::Stream;
use tokio::sync::mpsc;

/// A tick every `period` (the first after one period): full resyncs.
pub fn every(period: Duration) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(period).await;
        Some(((), ()))
    })
}

/// What `rx` receives, until every sender is gone.
pub fn unbounded<T: Send + 'static>(
    rx: mpsc::UnboundedReceiver<T>,
) -> impl Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|t| (t, rx)) })
}
