//! The shape check of a mounted tool's stdout: it must be JSON, either an array of content
//! blocks or `{ "content": [blocks], "meta"?: {...} }`, each block a plain object with a
//! string `type`. Anything else fails that call with an error that echoes a preview of what
//! came and shows the two valid forms.

use serde_json::{Map, Value};

/// The most characters of the offending output echoed in an error.
pub(crate) const PREVIEW_CHARS: usize = 120;

/// The two valid forms, as shown in every error.
pub(crate) const VALID_FORMS: &str = r#"print one of: [{"type":"text","text":"hello"}]  or  {"content":[{"type":"text","text":"hello"}],"meta":{"any":"object"}}"#;

/// A checked result: the content blocks and the optional meta object, passed through as is.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shaped {
    /// The content blocks (each a plain object with a string `type`).
    pub(crate) content: Vec<Value>,
    /// The `meta` object of the object form.
    pub(crate) meta: Option<Map<String, Value>>,
}

/// The first `PREVIEW_CHARS` characters of `s`, marked when cut.
pub(crate) fn preview(s: &str) -> String {
    let mut chars = s.chars();
    let head: String = chars.by_ref().take(PREVIEW_CHARS).collect();
    let rest = chars.count();
    if rest == 0 {
        head
    } else {
        format!("{head}… ({rest} more characters)")
    }
}

fn fail(what: &str, raw: &str) -> String {
    format!(
        "the mounted tool's stdout is not a valid result: {what}. It printed: {:?}. Fix the command to {VALID_FORMS} (each block a JSON object with a string \"type\")",
        preview(raw)
    )
}

fn check_blocks(blocks: &[Value], raw: &str) -> Result<(), String> {
    for (i, b) in blocks.iter().enumerate() {
        match b {
            Value::Object(m) => match m.get("type") {
                Some(Value::String(_)) => {}
                Some(_) => {
                    return Err(fail(
                        &format!("block {i} has a \"type\" that is not a string"),
                        raw,
                    ));
                }
                None => return Err(fail(&format!("block {i} has no \"type\""), raw)),
            },
            other => {
                return Err(fail(
                    &format!("block {i} is {}, not an object", kind(other)),
                    raw,
                ));
            }
        }
    }
    Ok(())
}

/// What kind of JSON value `v` is, with its article, for teaching errors ("a string").
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks a mounted tool's stdout.
///
/// # Errors
///
/// A teaching message (what is wrong, a preview of at most [`PREVIEW_CHARS`] characters, the
/// two valid forms) when the output is not JSON or not one of the two forms.
pub(crate) fn check(stdout: &[u8]) -> Result<Shaped, String> {
    let raw = String::from_utf8_lossy(stdout);
    let v: Value = match serde_json::from_str(raw.trim()) {
        Ok(v) => v,
        Err(e) => return Err(fail(&format!("it is not JSON ({e})"), &raw)),
    };
    match v {
        Value::Array(blocks) => {
            check_blocks(&blocks, &raw)?;
            Ok(Shaped {
                content: blocks,
                meta: None,
            })
        }
        Value::Object(mut m) => {
            if let Some(k) = m.keys().find(|k| *k != "content" && *k != "meta") {
                return Err(fail(
                    &format!(
                        "the object has a key {k:?}; only \"content\" and \"meta\" are allowed"
                    ),
                    &raw,
                ));
            }
            let blocks = match m.remove("content") {
                Some(Value::Array(b)) => b,
                Some(other) => {
                    return Err(fail(
                        &format!("\"content\" is {}, not an array of blocks", kind(&other)),
                        &raw,
                    ));
                }
                None => return Err(fail("the object has no \"content\" array", &raw)),
            };
            check_blocks(&blocks, &raw)?;
            let meta = match m.remove("meta") {
                None => None,
                Some(Value::Object(meta)) => Some(meta),
                Some(other) => {
                    return Err(fail(
                        &format!("\"meta\" is {}, not an object", kind(&other)),
                        &raw,
                    ));
                }
            };
            Ok(Shaped {
                content: blocks,
                meta,
            })
        }
        other => Err(fail(
            &format!(
                "it is {}, not an array of blocks or an object",
                kind(&other)
            ),
            &raw,
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn array_form_passes_through() {
        let s = check(br#"[{"type":"text","text":"hi"},{"type":"image","data":"AA==","mimeType":"image/png"}]"#)
            .unwrap();
        assert_eq!(s.content.len(), 2);
        assert_eq!(s.content[1]["mimeType"], json!("image/png"));
        assert_eq!(s.meta, None);
    }

    #[test]
    fn object_form_keeps_meta_intact() {
        let s = check(
            b"  {\"content\":[{\"type\":\"text\",\"text\":\"ok\"}],\"meta\":{\"n\":1,\"deep\":{\"a\":[1,2]}}}\n",
        )
        .unwrap();
        assert_eq!(s.content, vec![json!({"type":"text","text":"ok"})]);
        assert_eq!(
            Value::Object(s.meta.unwrap()),
            json!({"n":1,"deep":{"a":[1,2]}})
        );
        let s = check(br#"{"content":[]}"#).unwrap();
        assert!(s.content.is_empty() && s.meta.is_none());
    }

    #[test]
    fn every_wrong_shape_fails_with_the_fix() {
        for (out, why) in [
            (&br#""ok""#[..], "a string"),
            (br#"{"content":"ok"}"#, "\"content\" is a string"),
            (br#"[{"text":"no type"}]"#, "block 0 has no \"type\""),
            (br#"[{"type":3}]"#, "not a string"),
            (br#"[{"type":"text"}, "x"]"#, "block 1 is a string"),
            (b"42", "a number"),
            (b"null", "null"),
            (b"hello world", "not JSON"),
            (b"", "not JSON"),
            (br#"{"content":[],"extra":1}"#, "key \"extra\""),
            (br#"{"content":[],"meta":[1]}"#, "\"meta\" is an array"),
            (br#"{"meta":{}}"#, "no \"content\""),
        ] {
            let e = check(out).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
            assert!(e.contains(VALID_FORMS), "{e}");
        }
    }

    #[test]
    fn the_preview_is_cut_at_120_characters() {
        let long = "é".repeat(500);
        let e = check(long.as_bytes()).unwrap_err();
        let shown = "é".repeat(PREVIEW_CHARS);
        assert!(
            e.contains(&format!("{shown}… (380 more characters)")),
            "{e}"
        );
        assert!(!e.contains(&"é".repeat(PREVIEW_CHARS + 1)), "{e}");
        assert_eq!(preview("short"), "short");
        assert_eq!(preview(&"x".repeat(120)), "x".repeat(120));
    }
}
