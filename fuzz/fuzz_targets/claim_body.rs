//! The claim body reader on arbitrary bytes: it refuses with a reason or reads a claim, never
//! panics; and a claim it read applies to stored facts and is idempotent.
#![no_main]

use capstan_agent_channel::domain::claims::{apply, parse_claim, NodeFacts};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(claim) = parse_claim(data) {
        let first = apply(&NodeFacts::default(), &claim).unwrap_or_default();
        assert!(apply(&first, &claim).is_none(), "the same claim twice changes nothing the second time");
        assert!(claim.ignored_fields.windows(2).all(|pair| pair[0] <= pair[1]));
    }
});
