//! Fuzz target: see `e2b_envd::fuzzing::connect_envelope`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    e2b_envd::fuzzing::connect_envelope(data);
});
