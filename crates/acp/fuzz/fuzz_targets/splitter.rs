//! The line splitter on arbitrary bytes cut into arbitrary chunks: no panic, every line within
//! the limit, no `\n` inside a line, no blank line, and the lines are exactly the non-blank
//! lines of the input (CR before LF removed) until the first oversized one.
#![no_main]

use e2b_acp::fuzzing::LineSplitter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let max = usize::from(data[0] % 64) + 1;
    let step = usize::from(data[1] % 17) + 1;
    let input = &data[2..];
    let Ok(mut s) = LineSplitter::new(max) else {
        return;
    };
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut failed = false;
    'outer: for chunk in input.chunks(step) {
        s.push(chunk);
        while let Some(r) = s.next_line() {
            match r {
                Ok(line) => got.push(line.to_vec()),
                Err(_) => {
                    failed = true;
                    break 'outer;
                }
            }
        }
        assert!(s.pending_len() <= max + chunk.len() + 1, "pending grew past the bound");
    }
    if !failed {
        match s.finish() {
            Some(Ok(line)) => got.push(line.to_vec()),
            Some(Err(_)) => failed = true,
            None => {}
        }
    }
    for l in &got {
        assert!(l.len() <= max, "a line over the limit");
        assert!(!l.contains(&b'\n'), "a newline inside a line");
        assert!(l.iter().any(|b| !b" \t\r".contains(b)), "a blank line");
    }
    // The reference: split on LF, drop one CR before it, skip blank lines.
    let mut want: Vec<Vec<u8>> = Vec::new();
    for raw in input.split(|b| *b == b'\n') {
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        if line.iter().all(|b| b" \t\r".contains(b)) {
            continue;
        }
        want.push(line.to_vec());
    }
    if !failed {
        assert_eq!(got, want, "lines differ from the reference split");
    } else {
        assert!(want.starts_with(&got), "lines before the oversized one differ");
    }
});
