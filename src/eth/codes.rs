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
/// the message `execution reverted`, followed by `: <reason>` as geth
/// gives it: the reason of a Solidity `Error(string)` (bytes that are not
/// UTF-8 replaced by U+FFFD, byte by byte), or what a `Panic(uint256)` code means
/// (`assert(false)`, `division or modulo by zero`, ..., else
/// `unknown panic code: 0x..`).
///
/// ```
/// # use rpcwire::eth::codes::execution_reverted;
/// let mut output = vec![0x4e, 0x48, 0x7b, 0x71];
/// output.extend_from_slice(&[0; 31]);
/// output.push(0x12);
/// assert_eq!(
///     execution_reverted(&output).message(),
///     "execution reverted: division or modulo by zero"
/// );
/// ```
pub fn execution_reverted(output: &[u8]) -> RpcError {
    let message = if let Some(reason) = error_string(output) {
        format!("execution reverted: {}", lossy_as_go(reason))
    } else if let Some(code) = output
        .strip_prefix(&PANIC_SELECTOR)
        .and_then(|b| b.get(..32))
    {
        format!("execution reverted: {}", panic_reason(code))
    } else {
        "execution reverted".to_owned()
    };
    let mut data = Vec::with_capacity(2 * output.len() + 4);
    super::write::data(&mut data, output);
    RpcError::new(EXECUTION_REVERTED, message)
        .with_raw_data(String::from_utf8(data).expect("hex is ASCII"))
}

/// `bytes` as text, each byte that is not part of UTF-8 replaced by
/// U+FFFD, as Go's `encoding/json` writes a string (geth's message):
/// `String::from_utf8_lossy` replaces a cut sequence once.
fn lossy_as_go(mut bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    loop {
        match core::str::from_utf8(bytes) {
            Ok(rest) => {
                text.push_str(rest);
                return text;
            }
            Err(e) => {
                let (valid, rest) = bytes.split_at(e.valid_up_to());
                text.push_str(core::str::from_utf8(valid).expect("checked"));
                text.push('\u{fffd}');
                bytes = &rest[1..];
            }
        }
    }
}

/// `Panic(uint256)`'s selector: what Solidity reverts with on a failed
/// `assert`, an overflow, a division by zero and the like.
const PANIC_SELECTOR: [u8; 4] = [0x4e, 0x48, 0x7b, 0x71];

/// What a `Panic(uint256)` code (a big-endian word) means, in geth's
/// words.
fn panic_reason(word: &[u8]) -> std::borrow::Cow<'static, str> {
    let small = word[..31].iter().all(|&b| b == 0);
    let known = match word[31] {
        0x00 => "generic panic",
        0x01 => "assert(false)",
        0x11 => "arithmetic underflow or overflow",
        0x12 => "division or modulo by zero",
        0x21 => "enum overflow",
        0x22 => "invalid encoded storage byte array accessed",
        0x31 => "out-of-bounds array access; popping on an empty array",
        0x32 => "out-of-bounds access of an array or bytesN",
        0x41 => "out of memory",
        0x51 => "uninitialized function",
        _ => "",
    };
    if small && !known.is_empty() {
        return known.into();
    }
    // As Go's `%#x` of the number: no leading zeros.
    let digits = const_hex::encode(word);
    let digits = digits.trim_start_matches('0');
    format!(
        "unknown panic code: 0x{}",
        if digits.is_empty() { "0" } else { digits }
    )
    .into()
}

/// The reason of an ABI-encoded `Error(string)` (selector `0x08c379a0`),
/// if it is UTF-8.
pub fn revert_reason(output: &[u8]) -> Option<&str> {
    core::str::from_utf8(error_string(output)?).ok()
}

/// The bytes of an ABI-encoded `Error(string)`'s reason.
fn error_string(output: &[u8]) -> Option<&[u8]> {
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
    body.get(start..start.checked_add(len)?)
}
