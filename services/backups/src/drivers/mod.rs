//! The outside systems: the S3-compatible storage (`s3`, signing and presigning with
//! `rusty-s3`, requests over hyper with rustls) and the sealing of targets' credentials at rest
//! (`seal`, ChaCha20-Poly1305 from `ring`).

pub mod s3;
pub mod seal;
