//! `tools/call` round trips: rpcwire's MCP layer against the same server
//! written with rmcp (the official Rust SDK), in the same run.
//!
//! Both servers run their own stdio loop over an in-memory duplex pipe on
//! one current-thread tokio runtime, and one driver speaks to each the same
//! way: `initialize` + `notifications/initialized`, then `tools/call`
//! requests, one line each, the next written once the reply line is read
//! (sequential round trips), and again with 32 requests in flight
//! (pipelined). Each call is parsed, its arguments checked, a trivial tool
//! run, its result written and read back; every reply is checked for its id
//! and its `"status":"ok"`.
//!
//! The tool is `build-app` (`project_dir`, `arch` enum, `configuration`
//! enum); every call's arguments are distinct (its own `project_dir`). rpcwire checks the arguments against the JSON Schema
//! (`jsonschema`); the rmcp server decodes them into a typed struct with
//! serde (how rmcp tools take arguments), and a second rmcp variant also
//! checks them against the same schema with `jsonschema`, for the same work.
//!
//! `cargo bench --features peers,mcp --bench mcp` (`MCP_BENCH_CALLS` sets the
//! calls per sample, default 20,000).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities,
};
use rmcp::service::{RequestContext, RoleServer};
use rpcwire::mcp::{McpServer, Tool, ToolContext, ToolOutput};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};

fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "project_dir": {"type": "string"},
            "configuration": {"type": "string", "enum": ["Debug", "Release"]},
            "arch": {"type": "string", "enum": ["arm64", "x86_64"]}
        },
        "required": ["project_dir", "arch"]
    })
}

fn artifact(dir: &str, configuration: &str, arch: &str) -> Value {
    json!({"status": "ok", "artifact": format!("{dir}/build/{configuration}/{arch}/app"), "configuration": configuration, "arch": arch})
}

fn rpcwire_server() -> McpServer {
    McpServer::builder("bench", "1")
        .tool(Tool::new(
            "build-app",
            input_schema(),
            |args: Value, _cx: ToolContext| async move {
                let dir = args["project_dir"].as_str().unwrap_or_default();
                let configuration = args["configuration"].as_str().unwrap_or("Debug");
                let arch = args["arch"].as_str().unwrap_or_default();
                Ok(ToolOutput::structured(artifact(dir, configuration, arch)))
            },
        ))
        .build()
        .unwrap()
}

#[derive(Deserialize)]
enum Arch {
    #[serde(rename = "arm64")]
    Arm64,
    #[serde(rename = "x86_64")]
    X86_64,
}

#[derive(Deserialize, Default)]
enum Configuration {
    #[default]
    Debug,
    Release,
}

#[derive(Deserialize)]
struct BuildArgs {
    project_dir: String,
    #[serde(default)]
    configuration: Configuration,
    arch: Arch,
}

#[derive(Clone)]
struct RmcpServer {
    tools: Arc<Vec<rmcp::model::Tool>>,
    /// The same JSON Schema check as rpcwire's, when set.
    validator: Option<Arc<jsonschema::Validator>>,
}

impl RmcpServer {
    fn new(validate: bool) -> RmcpServer {
        let schema = input_schema();
        let Value::Object(object) = schema.clone() else {
            unreachable!()
        };
        RmcpServer {
            tools: Arc::new(vec![rmcp::model::Tool::new(
                "build-app",
                "builds",
                Arc::new(object),
            )]),
            validator: validate.then(|| Arc::new(jsonschema::validator_for(&schema).unwrap())),
        }
    }
}

impl ServerHandler for RmcpServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items((*self.tools).clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "build-app" {
            return Err(ErrorData::invalid_params("unknown tool", None));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        if let Some(v) = &self.validator
            && let Err(e) = v.validate(&args)
        {
            return Err(ErrorData::invalid_params(e.to_string(), None));
        }
        let a: BuildArgs = serde_json::from_value(args)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let configuration = match a.configuration {
            Configuration::Debug => "Debug",
            Configuration::Release => "Release",
        };
        let arch = match a.arch {
            Arch::Arm64 => "arm64",
            Arch::X86_64 => "x86_64",
        };
        Ok(CallToolResult::structured(artifact(&a.project_dir, configuration, arch)).into())
    }
}

/// The client side of one server's pipe.
struct Driver {
    tx: DuplexStream,
    rx: BufReader<DuplexStream>,
    line: String,
    next_id: u64,
}

impl Driver {
    async fn send(&mut self, msg: &str) {
        self.tx.write_all(msg.as_bytes()).await.unwrap();
        self.tx.write_all(b"\n").await.unwrap();
    }

    async fn recv(&mut self) -> &str {
        self.line.clear();
        let n = self.rx.read_line(&mut self.line).await.unwrap();
        assert!(n > 0, "server closed the pipe");
        &self.line
    }

    async fn handshake(&mut self) {
        self.send(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#).await;
        let reply = self.recv().await;
        assert!(reply.contains("\"result\""), "{reply}");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        self.next_id = 1;
    }

    fn call(&mut self, i: u64) -> String {
        let id = self.next_id;
        self.next_id += 1;
        let (arch, configuration) = if i.is_multiple_of(2) {
            ("arm64", "Release")
        } else {
            ("x86_64", "Debug")
        };
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"build-app","arguments":{{"project_dir":"/work/app{i}","configuration":"{configuration}","arch":"{arch}"}}}}}}"#
        )
    }

    fn check(reply: &str) {
        assert!(
            reply.contains(r#""status":"ok""#) && reply.contains("\"id\":"),
            "{reply}"
        );
    }

    /// `calls` sequential round trips.
    async fn sequential(&mut self, calls: u64) -> Duration {
        let start = Instant::now();
        for i in 0..calls {
            let msg = self.call(i);
            self.send(&msg).await;
            Driver::check(self.recv().await);
        }
        start.elapsed()
    }

    /// `calls` calls with up to `depth` in flight.
    async fn pipelined(&mut self, calls: u64, depth: u64) -> Duration {
        let start = Instant::now();
        let mut sent = 0;
        let mut received = 0;
        let mut batch = String::new();
        while received < calls {
            batch.clear();
            while sent < calls && sent - received < depth {
                batch.push_str(&self.call(sent));
                batch.push('\n');
                sent += 1;
            }
            if !batch.is_empty() {
                self.tx.write_all(batch.as_bytes()).await.unwrap();
            }
            Driver::check(self.recv().await);
            received += 1;
        }
        start.elapsed()
    }
}

fn pipes() -> (Driver, (DuplexStream, DuplexStream)) {
    let (client_w, server_r) = tokio::io::duplex(1 << 20);
    let (server_w, client_r) = tokio::io::duplex(1 << 20);
    (
        Driver {
            tx: client_w,
            rx: BufReader::new(client_r),
            line: String::new(),
            next_id: 0,
        },
        (server_r, server_w),
    )
}

async fn rpcwire_driver() -> Driver {
    let (mut d, (r, w)) = pipes();
    let server = rpcwire_server();
    tokio::spawn(async move { server.serve_stream(r, w).await });
    d.handshake().await;
    d
}

async fn rmcp_driver(validate: bool) -> Driver {
    let (mut d, (r, w)) = pipes();
    tokio::spawn(async move {
        let running = rmcp::serve_server(RmcpServer::new(validate), (r, w))
            .await
            .unwrap();
        let _ = running.waiting().await;
    });
    d.handshake().await;
    d
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter naming another bench skips.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args
        .iter()
        .any(|a| !"mcp".contains(a.as_str()) && !"tools_call".contains(a.as_str()))
    {
        return;
    }
    let calls: u64 = std::env::var("MCP_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let samples = 5;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut drivers = [
            ("rpcwire (jsonschema)", rpcwire_driver().await),
            ("rmcp (serde-typed args)", rmcp_driver(false).await),
            ("rmcp + jsonschema", rmcp_driver(true).await),
        ];
        for (mode, depth) in [("sequential", 1u64), ("pipelined x32", 32)] {
            // Warm up, then alternate samples so that both see the same
            // machine.
            for (_, d) in drivers.iter_mut() {
                d.pipelined(calls / 10, depth).await;
            }
            let mut per_call: Vec<Vec<f64>> = vec![Vec::new(); drivers.len()];
            for _ in 0..samples {
                for (i, (_, d)) in drivers.iter_mut().enumerate() {
                    let t = if depth == 1 {
                        d.sequential(calls).await
                    } else {
                        d.pipelined(calls, depth).await
                    };
                    per_call[i].push(t.as_nanos() as f64 / calls as f64);
                }
            }
            let ours = median(per_call[0].clone());
            println!("tools/call round trip, {mode}, {calls} calls x {samples} samples (median ns per call):");
            for (i, (name, _)) in drivers.iter().enumerate() {
                let m = median(per_call[i].clone());
                println!("  {name:<26} {m:>9.0} ns/call   {:>5.2}x rpcwire's time", m / ours);
            }
        }
    });
}
