//! Caught handler panics can be kept quiet without silencing the process's
//! panic hook for anything else. (Its own test binary: the hook is global.)

use std::sync::atomic::{AtomicUsize, Ordering};

use rpcwire::{Call, Connection, Dispatcher, RpcError};

static HOOK_CALLS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn quiet_panics_skip_the_hook_only_inside_handlers() {
    // The application's own hook, set first: it counts what reaches it.
    std::panic::set_hook(Box::new(|_| {
        HOOK_CALLS.fetch_add(1, Ordering::SeqCst);
    }));
    let boom = |_c: Call<'_, ()>| -> Result<(), RpcError> { panic!("handler failed") };
    let quiet = Dispatcher::builder(())
        .quiet_panics(true)
        .method("boom", boom)
        .build()
        .unwrap();
    let loud = Dispatcher::builder(())
        .method("boom", boom)
        .build()
        .unwrap();

    // A 1000-entry batch against a panicking handler: every entry answered
    // with -32603, and the hook (which prints a backtrace by default) is
    // never called.
    let entry = r#"{"jsonrpc":"2.0","id":1,"method":"boom"}"#;
    let batch = format!("[{}]", vec![entry; 1000].join(","));
    let mut out = Vec::new();
    quiet.handle(batch.as_bytes(), &mut Connection::new(), &mut out);
    let r: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(r.as_array().unwrap().len(), 1000);
    assert!(
        r.as_array().unwrap().iter().all(
            |e| e["error"]["code"] == -32603 && e["error"]["data"]["panic"] == "handler failed"
        )
    );
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 0);

    // A dispatcher that did not ask for quiet still reaches the hook.
    out.clear();
    loud.handle(entry.as_bytes(), &mut Connection::new(), &mut out);
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 1);

    // And so does any panic outside a handler.
    let _ = std::panic::catch_unwind(|| panic!("elsewhere"));
    assert_eq!(HOOK_CALLS.load(Ordering::SeqCst), 2);
}
