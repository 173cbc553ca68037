//! geth's server error codes, and the errors Ethereum clients expect with
//! them.
//!
//! ```
//! use rpcwire::eth::codes;
//!
//! // `revert("not owner")`: Error(string) ABI-encoded.
//! let output = const_hex::decode("0x08c379a0\
//!     0000000000000000000000000000000000000000000000000000000000000020\
//!     0000000000000000000000000000000000000000000000000000000000000009\
//!     6e6f74206f776e65720000000000000000000000000000000000000000000000").unwrap();
//! let e = codes::execution_reverted(&output);
//! assert_eq!((e.code(), e.message()), (3, "execution reverted: not owner"));
//! assert!(e.data().unwrap().starts_with("\"0x08c379a0"));
//! ```

use crate::dispatch::RpcError;

/// -32000: geth's generic server error ("nonce too low", "insufficient
/// funds for gas * price + value", "header not found", …).
pub const SERVER_ERROR: i32 = -32000;
/// -32002: the request timed out (geth's `--rpc.evmtimeout` /
/// `http.timeout`, and gateways' upstream timeouts).
pub const REQUEST_TIMEOUT: i32 = -32002;
/// -32003: the response would exceed the size limit (geth's
/// `--rpc.batch-response-max-size`); also "transaction rejected" in
/// EIP-1474. Pass it to
/// [`DispatcherBuilder::too_large_code`](crate::dispatch::DispatcherBuilder::too_large_code).
pub const RESPONSE_TOO_LARGE: i32 = -32003;
/// 3: execution reverted; `data` carries the revert output as DATA.
pub const EXECUTION_REVERTED: i32 = 3;

/// A -32000 error with geth's message for it.
pub fn server_error(message: impl Into<std::borrow::Cow<'static, str>>) -> RpcError {
    RpcError::new(SERVER_ERROR, message)
}

/// geth's timeout error: -32002, "request timed out".
pub fn request_timeout() -> RpcError {
    RpcError::new(REQUEST_TIMEOUT, "request timed out")
}

/// geth's revert error: code 3, the revert output as DATA in `data`, and
/// the message `execution reverted`, followed by `: <reason>` when the
/// output is a Solidity `Error(string)` whose reason is valid UTF-8.
pub fn execution_reverted(output: &[u8]) -> RpcError {
    let message = match revert_reason(output) {
        Some(reason) => format!("execution reverted: {reason}"),
        None => "execution reverted".to_owned(),
    };
    let mut data = Vec::with_capacity(2 * output.len() + 4);
    super::write::data(&mut data, output);
    RpcError::new(EXECUTION_REVERTED, message)
        .with_raw_data(String::from_utf8(data).expect("hex is ASCII"))
}

/// The reason of an ABI-encoded `Error(string)` (selector `0x08c379a0`).
pub fn revert_reason(output: &[u8]) -> Option<&str> {
    let body = output.strip_prefix(&[0x08, 0xc3, 0x79, 0xa0])?;
    let word = |at: usize| -> Option<usize> {
        let w = body.get(at..at.checked_add(32)?)?;
        // A length or offset that fits in a usize: the high bytes are zero.
        if w[..24].iter().any(|&b| b != 0) {
            return None;
        }
        usize::try_from(u64::from_be_bytes(w[24..].try_into().ok()?)).ok()
    };
    let offset = word(0)?;
    let len = word(offset)?;
    let start = offset.checked_add(32)?;
    let text = body.get(start..start.checked_add(len)?)?;
    core::str::from_utf8(text).ok()
}
