//! Runnable programs that use ggraph as a library, one per file in
//! `examples/` (`cargo run -p ggraph-examples --example NAME`); the
//! package has no library of its own.
