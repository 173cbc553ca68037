//! What the tests' asking handlers do: ask the client something through
//! the connection's peer (MCP sampling, LSP `workspace/configuration`).

use std::time::Duration;

use rpcwire::RpcError;
use serde_json::{Value, json};

/// `client/ping` through the connection's peer, the answer's result
/// decoded.
pub async fn ask_the_client(ctx: &rpcwire::Context) -> Result<Value, RpcError> {
    let peer = ctx.peer().expect("two-way").clone();
    let answer = peer
        .request("client/ping", Some(&json!([])), Duration::from_secs(3600))
        .await
        .map_err(|e| RpcError::internal(e.to_string()))?;
    answer
        .decode::<Value>()
        .map_err(|e| RpcError::internal(e.to_string()))
}
