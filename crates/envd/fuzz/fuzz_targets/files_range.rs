//! Fuzz target: see `e2b_envd::fuzzing::files_range`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    e2b_envd::fuzzing::files_range(data);
});
