//! Loads `tests/data/jsonrpc-spec-examples.txt`.
#![allow(dead_code)]

pub struct Example {
    pub title: String,
    pub request: String,
    /// `None` when the specification expects no reply at all.
    pub reply: Option<String>,
}

pub fn examples() -> Vec<Example> {
    let text = include_str!("../data/jsonrpc-spec-examples.txt");
    let mut out: Vec<Example> = Vec::new();
    let mut target: Option<bool> = None; // Some(true) = request, Some(false) = reply
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("### ") {
            out.push(Example {
                title: title.to_string(),
                request: String::new(),
                reply: None,
            });
            target = None;
        } else if line.starts_with('#') && target.is_none() {
            continue;
        } else if let Some(rest) = line.strip_prefix("--> ") {
            out.last_mut().unwrap().request.push_str(rest);
            target = Some(true);
        } else if let Some(rest) = line.strip_prefix("<-- ") {
            out.last_mut().unwrap().reply = Some(rest.to_string());
            target = Some(false);
        } else if line.trim().is_empty() {
            target = None;
        } else {
            let ex = out.last_mut().unwrap();
            match target {
                Some(true) => {
                    ex.request.push('\n');
                    ex.request.push_str(line);
                }
                Some(false) => {
                    let reply = ex.reply.as_mut().unwrap();
                    reply.push('\n');
                    reply.push_str(line);
                }
                None => panic!("stray line in spec examples: {line}"),
            }
        }
    }
    assert_eq!(
        out.len(),
        15,
        "every example of the specification is transcribed"
    );
    out
}
