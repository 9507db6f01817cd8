//! The events file against `schema/events.schema.json`, the JSON Schema generated from the
//! event types (`src/generate.rs`): real events fit it, broken ones do not.

use std::path::Path;

use serde_json::{json, Value};

use crate::records::events;
use crate::support::*;

pub(crate) fn schema() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/events.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|err| panic!("the events schema is not a valid JSON Schema: {err}"))
}

pub(crate) fn errors(schema: &jsonschema::Validator, event: &Value) -> Vec<String> {
    schema
        .iter_errors(event)
        .map(|err| format!("{}: {err}", err.instance_path()))
        .collect()
}

#[test]
fn every_event_of_a_run_fits_the_schema() {
    let scratch = Scratch::new();
    let path = scratch.join("events.jsonl");
    // Queued, started, retried, batched, ended, and a line without a tab.
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .arg("--events")
        .arg(&path)
        .args([
            "--retries",
            "1",
            "--command",
            "for a in {}; do test \"$a\" != bad || exit 1; done",
            "--batch-size",
            "2",
            // One slot: b waits while a's batch runs, so a `waiting` event is told.
            "-j",
            "1",
        ])
        .stdin("a\tok\nb\tbad\nno tab here\na\tok2\n")
        .run();
    out.code(1);
    let events = events(&path);
    assert!(events.len() >= 7, "{events:?}");
    let schema = schema();
    for event in &events {
        assert_eq!(errors(&schema, event), Vec::<String>::new(), "{event}");
    }
    let kinds: std::collections::BTreeSet<_> =
        events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["ended", "queued", "started", "waiting"]
    );
}

#[test]
fn the_events_schema_refuses_broken_events() {
    let schema = schema();
    let good = json!({"type":"started","seq":1,"key":"a","slot":1,"attempt":1,
        "at":"2026-11-29T11:45:26.051Z"});
    assert_eq!(errors(&schema, &good), Vec::<String>::new());
    for (field, bad) in [
        ("type", json!("begun")),
        ("slot", json!(0)),
        ("at", json!("yesterday")),
        ("extra", json!(1)),
        ("key", json!(null)),
    ] {
        let mut event = good.clone();
        event[field] = bad.clone();
        assert!(
            !errors(&schema, &event).is_empty(),
            "{field} = {bad} accepted"
        );
    }
    let ended = json!({"type":"ended","seq":2,"key":null,"outcome":"rejected",
        "reason":"invalid_input","attempt":0,"retry":false,"at":"2026-11-29T11:45:26.051Z"});
    assert_eq!(errors(&schema, &ended), Vec::<String>::new());
    let mut wrong = ended.clone();
    wrong["outcome"] = json!("passed");
    assert!(!errors(&schema, &wrong).is_empty());
}
