//! Puts a dispatcher (the built-in chain's or the forwarding one) on one
//! listener: HTTP `POST` and WebSocket upgrades on the same port.

use std::sync::Arc;

use rpcwire::server::http::HttpService;
use rpcwire::server::subscriptions::SubscriptionConfig;
use rpcwire::server::ws::WsServer;
use rpcwire::server::{Shutdown, combined};
use tokio::net::TcpListener;

use crate::chain::Chain;
use crate::config::Config;
use crate::{local, proxy};

/// Serves `config` on `listener` until `shutdown`.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), Box<dyn std::error::Error>> {
    let limits = config.limits();
    if config.proxies() {
        let d = proxy::dispatcher(&config)?;
        let http = HttpService::new(d.clone(), &limits, None);
        let ws = WsServer::new(d)
            .limits(limits.clone())
            .subscriptions(SubscriptionConfig::default())
            .shutdown(shutdown.clone());
        combined::serve(listener, http, ws, limits, None, shutdown).await;
    } else {
        let chain = Arc::new(Chain::new(config.chain_id));
        if let Some(every) = config.block_time {
            let (chain, stop) = (Arc::clone(&chain), shutdown.clone());
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(every);
                ticks.tick().await;
                loop {
                    tokio::select! {
                        _ = ticks.tick() => chain.mine_empty(),
                        _ = stop.triggered() => break,
                    }
                }
            });
        }
        let d = local::dispatcher(chain, &config)?;
        let http = HttpService::new(d.clone(), &limits, None);
        let ws = WsServer::new(d)
            .limits(limits.clone())
            .shutdown(shutdown.clone());
        combined::serve(listener, http, ws, limits, None, shutdown).await;
    }
    Ok(())
}
