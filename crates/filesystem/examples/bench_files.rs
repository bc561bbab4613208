//! Placeholder; replaced by the benchmark.
fn main() {}
