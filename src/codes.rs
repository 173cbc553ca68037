//! JSON-RPC 2.0 error codes: the five the specification defines, the
//! server-defined ones (-32000 to -32099) rpcwire answers with, and LSP's
//! request-cancelled (-32800, outside both: LSP reserves it).

/// "Parse error": the bytes are not one valid JSON value (also: nesting
/// deeper than the parser's depth limit).
pub const PARSE_ERROR: i32 = -32700;
/// "Invalid Request": valid JSON, but not a valid request.
pub const INVALID_REQUEST: i32 = -32600;
/// "Method not found".
pub const METHOD_NOT_FOUND: i32 = -32601;
/// "Invalid params".
pub const INVALID_PARAMS: i32 = -32602;
/// "Internal error": a handler failed unexpectedly (an I/O error, a panic).
pub const INTERNAL_ERROR: i32 = -32603;
/// The first code of the range the specification leaves to servers; a
/// generic server error. The dispatcher's own errors (a reply past the
/// response size limit, a call past its timeout) use it by default, each
/// with its own message and `data`; their codes are configurable
/// ([`DispatcherBuilder::too_large_code`](crate::dispatch::DispatcherBuilder::too_large_code),
/// [`DispatcherBuilder::timeout_code`](crate::dispatch::DispatcherBuilder::timeout_code)),
/// and the Ethereum layer has geth's (`eth::codes`, feature `eth`).
pub const SERVER_ERROR: i32 = -32000;
/// A request cancelled before it finished (the LSP code), for batch entries,
/// which must be answered.
pub const REQUEST_CANCELLED: i32 = -32800;
/// A limit of the server was exceeded (EIP-1474's "Limit exceeded"): too
/// many subscriptions on one connection, or a subscription closed because
/// its client read too slowly; `data` gives the limit.
pub const LIMIT_EXCEEDED: i32 = -32005;
